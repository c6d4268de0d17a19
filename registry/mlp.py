"""mlp slot, dense kinds: `relu`, `gelu` and `swiglu` (the mixture of experts is in `moe.py`).

Every mlp takes `hidden`, its inner width; the defaults make the kinds comparable at equal size:
4·dim for relu and gelu, and 8/3·dim rounded up to a multiple of 64 for swiglu (three matrices
instead of two). Every mlp exposes `aux_loss` (0-dim) and `expert_load` ([n_experts] or None)
after forward, so the model reads them without knowing which kind it has. The residual output
projection is named `down_proj`; the model scales its init by 1/sqrt(2·n_layers).
"""

import math
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from annotated_types import Gt
from torch import nn

from registry.core import register

Hidden = Annotated[int, Gt(0)] | None


def swiglu_hidden(dim: int, multiple: int = 64) -> int:
    """ceil(8/3·dim) rounded up to a multiple of `multiple`: 1408 for dim 512."""
    return multiple * math.ceil(math.ceil(8 * dim / 3) / multiple)


class DenseMLP(nn.Module):
    """Shared by the dense kinds: no auxiliary loss and no experts."""

    expert_load: torch.Tensor | None = None

    @property
    def aux_loss(self) -> torch.Tensor:
        # A plain tensor, not `weight.new_zeros`: under FSDP the weight is a sharded DTensor.
        weight = self.down_proj.weight
        return torch.zeros((), dtype=weight.dtype, device=weight.device)


@register("mlp", "relu")
class ReluMLP(DenseMLP):
    """down(act(up(x))): x [..., dim] -> [..., dim], with act = ReLU."""

    @dataclass(frozen=True)
    class Options:
        hidden: Hidden = None
        bias: bool = False

    def __init__(self, options: Options, *, dim: int, dropout: float) -> None:
        super().__init__()
        hidden = options.hidden or 4 * dim
        self.up_proj = nn.Linear(dim, hidden, bias=options.bias)
        self.down_proj = nn.Linear(hidden, dim, bias=options.bias)
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def param_count(cls, options: Options, *, dim: int, dropout: float) -> int:
        hidden = options.hidden or 4 * dim
        return 2 * dim * hidden + ((hidden + dim) if options.bias else 0)

    def activation(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down_proj(self.activation(self.up_proj(x))))


@register("mlp", "gelu")
class GeluMLP(ReluMLP):
    """down(gelu(up(x))); `approximate: tanh` is GPT-2's variant."""

    @dataclass(frozen=True)
    class Options(ReluMLP.Options):
        approximate: Literal["none", "tanh"] = "none"

    def __init__(self, options: Options, *, dim: int, dropout: float) -> None:
        super().__init__(options, dim=dim, dropout=dropout)
        self.approximate = options.approximate

    def activation(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate=self.approximate)


@register("mlp", "swiglu")
class SwiGLUMLP(DenseMLP):
    """down(silu(gate(x)) * up(x)) (Shazeer 2020; Llama's naming): x [..., dim] -> [..., dim]."""

    @dataclass(frozen=True)
    class Options:
        hidden: Hidden = None
        bias: bool = False

    def __init__(self, options: Options, *, dim: int, dropout: float) -> None:
        super().__init__()
        hidden = options.hidden or swiglu_hidden(dim)
        self.gate_proj = nn.Linear(dim, hidden, bias=options.bias)
        self.up_proj = nn.Linear(dim, hidden, bias=options.bias)
        self.down_proj = nn.Linear(hidden, dim, bias=options.bias)
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def param_count(cls, options: Options, *, dim: int, dropout: float) -> int:
        hidden = options.hidden or swiglu_hidden(dim)
        return 3 * dim * hidden + ((2 * hidden + dim) if options.bias else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)))
