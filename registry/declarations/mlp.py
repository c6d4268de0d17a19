"""mlp slot, dense kinds: `relu`, `relu2`, `gelu` and `swiglu` (implemented in `registry/mlp.py`).

Every mlp takes `hidden`, its inner width; the defaults make the kinds comparable at equal size:
4·dim for relu, relu2 and gelu, and 8/3·dim rounded up to a multiple of 64 for swiglu (three
matrices instead of two).
"""

import math
from dataclasses import dataclass
from typing import Annotated, Literal

from annotated_types import Gt

from registry.core import register

Hidden = Annotated[int, Gt(0)] | None


def swiglu_hidden(dim: int, multiple: int = 64) -> int:
    """ceil(8/3·dim) rounded up to a multiple of `multiple`: 1408 for dim 512."""
    return multiple * math.ceil(math.ceil(8 * dim / 3) / multiple)


class Dense:
    """What the dense kinds share: their options, the inner width (`hidden`, else the kind's
    default) and the count of `matrices` dim x hidden matrices, with biases on the inner
    projections and the output one."""

    matrices = 2

    @dataclass(frozen=True)
    class Options:
        hidden: Hidden = None
        bias: bool = False

    @classmethod
    def default_hidden(cls, dim: int) -> int:
        return 4 * dim

    @classmethod
    def hidden_of(cls, options: Options, dim: int) -> int:
        return options.hidden or cls.default_hidden(dim)

    @classmethod
    def param_count(cls, options: Options, *, dim: int, dropout: float = 0.0) -> int:
        hidden = cls.hidden_of(options, dim)
        biases = (cls.matrices - 1) * hidden + dim if options.bias else 0
        return cls.matrices * dim * hidden + biases


@register("mlp", "relu", implementation="registry.mlp:ReluMLP")
class ReluMLP(Dense):
    pass


@register("mlp", "gelu", implementation="registry.mlp:GeluMLP")
class GeluMLP(ReluMLP):
    @dataclass(frozen=True)
    class Options(Dense.Options):
        approximate: Literal["none", "tanh"] = "none"


@register("mlp", "relu2", implementation="registry.mlp:Relu2MLP")
class Relu2MLP(ReluMLP):
    pass


@register("mlp", "swiglu", implementation="registry.mlp:SwiGLUMLP")
class SwiGLUMLP(Dense):
    matrices = 3  # gate, up and down

    @classmethod
    def default_hidden(cls, dim: int) -> int:
        return swiglu_hidden(dim)
