"""The built-in components' declarations: their names, options and the hooks that check and count
them (`registry.core`), with no torch. Each names its implementation in `registry/<slot>.py`,
which subclasses it and is imported only when the component is first built, so that validating a
spec does not import torch (seconds).

Importing this package registers the built-ins.
"""

from registry.declarations import (  # noqa: F401  (registers the built-ins)
    attention,
    block,
    mlp,
    moe,
    norm,
    optimizer,
    position,
)
