"""The component registry: five slots of swappable `torch.nn` modules, the optimizer slot, and the
mechanism around them.

    import registry
    norm = registry.build("norm", {"name": "rmsnorm", "eps": 1e-6}, dim=64)
    registry.choices("mlp")            # ['gelu', 'moe', 'relu', 'relu2', 'swiglu']
    registry.describe("position", "rope")

The built-in components register themselves when this package is imported; user code registers
more with the `register` decorator (see `registry.core`). Nothing here imports `minimind`.
"""

from registry import (  # noqa: F401  (registers built-ins)
    attention,
    block,
    mlp,
    moe,
    norm,
    optimizer,
    position,
)
from registry.attention import DocumentMask
from registry.core import (
    MODEL_SLOTS,
    SLOTS,
    ComponentSpec,
    OptionInfo,
    RegistryError,
    aliases,
    build,
    check_dims,
    choices,
    component_class,
    count_params,
    describe,
    load_plugins,
    register,
    resolve,
    suggest,
)
from registry.kv_cache import KVCacheLayer, StaticKVCache, causal_mask

__all__ = [
    "MODEL_SLOTS",
    "SLOTS",
    "ComponentSpec",
    "DocumentMask",
    "KVCacheLayer",
    "OptionInfo",
    "RegistryError",
    "StaticKVCache",
    "aliases",
    "build",
    "causal_mask",
    "check_dims",
    "choices",
    "component_class",
    "count_params",
    "describe",
    "load_plugins",
    "register",
    "resolve",
    "suggest",
]
