"""norm slot: `layernorm` and `rmsnorm`, on the fused `torch.nn.functional` kernels; options and
counts are declared in `registry/declarations/norm.py`."""

import torch
import torch.nn.functional as F
from torch import nn

from registry.declarations import norm as declared


class LayerNorm(declared.LayerNorm, nn.Module):
    """LayerNorm over the last dimension: x [..., dim] -> [..., dim]."""

    def __init__(self, options: declared.LayerNorm.Options, *, dim: int) -> None:
        super().__init__()
        self.dim, self.eps = dim, options.eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if options.bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)


class RMSNorm(declared.RMSNorm, nn.Module):
    """RMSNorm over the last dimension (no mean subtraction, no bias): x [..., dim] -> [..., dim]."""

    def __init__(self, options: declared.RMSNorm.Options, *, dim: int) -> None:
        super().__init__()
        self.dim, self.eps = dim, options.eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.dim,), self.weight, self.eps)
