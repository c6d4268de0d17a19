"""The component registry: five slots of swappable `torch.nn` modules, the optimizer slot, and the
mechanism around them.

    import registry
    norm = registry.build("norm", {"name": "rmsnorm", "eps": 1e-6}, dim=64)
    registry.choices("mlp")            # ['gelu', 'moe', 'relu', 'relu2', 'swiglu']
    registry.describe("position", "rope")

Importing this package registers the built-in components from their declarations
(`registry/declarations/`) without importing torch: names, options, checks and parameter counts
need none, and a component's module (`registry/<slot>.py`) is imported when it is first built.
User code registers more with the `register` decorator (see `registry.core`). Nothing here imports
`minimind`.
"""

from registry import declarations  # noqa: F401  (registers the built-ins)
from registry.core import (
    MODEL_SLOTS,
    SLOTS,
    ComponentSpec,
    OptionInfo,
    RegistryError,
    aliases,
    build,
    check_dims,
    check_interface,
    choices,
    component_class,
    count_params,
    declaration,
    describe,
    did_you_mean,
    load_plugins,
    register,
    resolve,
)

__all__ = [
    "MODEL_SLOTS",
    "SLOTS",
    "ComponentSpec",
    "OptionInfo",
    "RegistryError",
    "aliases",
    "build",
    "check_dims",
    "check_interface",
    "choices",
    "component_class",
    "count_params",
    "declaration",
    "describe",
    "load_plugins",
    "register",
    "resolve",
    "did_you_mean",
]
