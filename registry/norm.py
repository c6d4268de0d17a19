"""norm slot: `layernorm` and `rmsnorm`, on the fused `torch.nn.functional` kernels."""

from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from annotated_types import Gt
from torch import nn

from registry.core import register


@register("norm", "layernorm")
class LayerNorm(nn.Module):
    """LayerNorm over the last dimension: x [..., dim] -> [..., dim]."""

    @dataclass(frozen=True)
    class Options:
        eps: Annotated[float, Gt(0)] = 1e-5
        bias: bool = True

    def __init__(self, options: Options, *, dim: int) -> None:
        super().__init__()
        self.dim, self.eps = dim, options.eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if options.bias else None

    @classmethod
    def param_count(cls, options: Options, *, dim: int) -> int:
        return dim * (2 if options.bias else 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)


@register("norm", "rmsnorm")
class RMSNorm(nn.Module):
    """RMSNorm over the last dimension (no mean subtraction, no bias): x [..., dim] -> [..., dim]."""

    @dataclass(frozen=True)
    class Options:
        eps: Annotated[float, Gt(0)] = 1e-5

    def __init__(self, options: Options, *, dim: int) -> None:
        super().__init__()
        self.dim, self.eps = dim, options.eps
        self.weight = nn.Parameter(torch.ones(dim))

    @classmethod
    def param_count(cls, options: Options, *, dim: int) -> int:
        return dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.dim,), self.weight, self.eps)
