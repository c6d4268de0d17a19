"""norm slot: `layernorm` and `rmsnorm` (implemented in `registry/norm.py`)."""

from dataclasses import dataclass
from typing import Annotated

from annotated_types import Gt

from registry.core import register


@register("norm", "layernorm", implementation="registry.norm:LayerNorm")
class LayerNorm:
    @dataclass(frozen=True)
    class Options:
        eps: Annotated[float, Gt(0)] = 1e-5
        bias: bool = True

    @classmethod
    def param_count(cls, options: Options, *, dim: int) -> int:
        return dim * (2 if options.bias else 1)


@register("norm", "rmsnorm", implementation="registry.norm:RMSNorm")
class RMSNorm:
    @dataclass(frozen=True)
    class Options:
        eps: Annotated[float, Gt(0)] = 1e-5

    @classmethod
    def param_count(cls, options: Options, *, dim: int) -> int:
        return dim
