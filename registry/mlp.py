"""mlp slot, dense kinds: `relu`, `relu2`, `gelu` and `swiglu` (the mixture of experts is in `moe.py`).

Every mlp takes `hidden`, its inner width (options, default widths and counts are declared in
`registry/declarations/mlp.py`). Every mlp exposes `aux_loss` (0-dim) and `expert_load` ([n_experts] or None)
after forward, so the model reads them without knowing which kind it has; a plugin mlp subclasses
`MLP`, where both default to None (no auxiliary loss, no experts). The residual output
projection is named `down_proj`; the model scales its init by 1/sqrt(2·n_layers).

Used as the experts of a `moe` mlp, each kind also runs all its experts at once with
`grouped_forward` (`torch.nn.functional.grouped_mm`, for `dispatch: grouped_mm`): the experts'
weights are stacked on each call, a differentiable copy, so gradients still reach every expert's
own `nn.Linear` and the parameter names (state_dict, checkpoints) are those of the per-expert loop.
Experts with `bias: true` have no grouped form (`registry.declarations.moe.grouped_mm_unsupported`).
"""

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from registry.declarations import mlp as declared


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Rows of group e times weight[e].T: x [N, in], weight [E, out, in], offs [E] -> [N, out].

    offs: int32 cumulative row counts, offs[e] the end of group e's rows; offs[-1] = N. A group may
    be empty; its weight then gets a zero gradient. No bias.
    """
    device = x.device.type
    # grouped_mm is on neither the CPU nor the CUDA autocast op list (torch 2.13) and needs equal
    # operand dtypes, so cast both as autocast casts nn.Linear's.
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        x, weight = x.to(dtype), weight.to(dtype)
    # [E, in, out] as a transposed view: the column-major operand layout grouped_mm takes as is.
    return F.grouped_mm(x, weight.transpose(1, 2), offs=offs)


class MLP(nn.Module):
    """The base a plugin mlp may subclass: no auxiliary loss and no experts unless it sets them.
    Built as `cls(options, *, dim, dropout)` (`cls(*, dim, dropout)` without `Options`):
    x [..., dim] -> [..., dim]."""

    aux_loss: torch.Tensor | None = None  # 0-dim, already scaled, added to the training loss
    expert_load: torch.Tensor | None = None  # [n_experts]: each expert's share of the tokens


class DenseMLP(nn.Module):
    """Shared by the dense kinds: no auxiliary loss and no experts."""

    expert_load: torch.Tensor | None = None
    down_proj: nn.Linear  # every dense kind's output projection

    @property
    def aux_loss(self) -> torch.Tensor:
        # A plain tensor, not `weight.new_zeros`: under FSDP the weight is a sharded DTensor.
        weight = self.down_proj.weight
        return torch.zeros((), dtype=weight.dtype, device=weight.device)


class ReluMLP(declared.ReluMLP, DenseMLP):
    """down(act(up(x))): x [..., dim] -> [..., dim], with act = ReLU."""

    def __init__(
        self, options: declared.ReluMLP.Options, *, dim: int, dropout: float = 0.0
    ) -> None:
        super().__init__()
        hidden = self.hidden_of(options, dim)
        self.up_proj = nn.Linear(dim, hidden, bias=options.bias)
        self.down_proj = nn.Linear(hidden, dim, bias=options.bias)
        self.dropout = nn.Dropout(dropout)

    def activation(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down_proj(self.activation(self.up_proj(x))))

    @classmethod
    def grouped_forward(
        cls, experts: Sequence["ReluMLP"], x: torch.Tensor, offs: torch.Tensor
    ) -> torch.Tensor:
        """Each expert's forward on its rows: x [N, dim] grouped by offs [E] (int32) -> [N, dim].

        The experts are alike (one options instance), so the first one's activation and dropout
        stand for all; gelu shares this through `activation`.
        """
        up = torch.stack([e.up_proj.weight for e in experts])
        down = torch.stack([e.down_proj.weight for e in experts])
        out = grouped_linear(experts[0].activation(grouped_linear(x, up, offs)), down, offs)
        return experts[0].dropout(out)


class GeluMLP(declared.GeluMLP, ReluMLP):
    """down(gelu(up(x))); `approximate: tanh` is GPT-2's variant."""

    def __init__(
        self, options: declared.GeluMLP.Options, *, dim: int, dropout: float = 0.0
    ) -> None:
        super().__init__(options, dim=dim, dropout=dropout)
        self.approximate = options.approximate

    def activation(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate=self.approximate)


class Relu2MLP(declared.Relu2MLP, ReluMLP):
    """down(relu(up(x))²): squared ReLU (So et al. 2021, Primer; modded-nanogpt, nanochat)."""

    def activation(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).square()


class SwiGLUMLP(declared.SwiGLUMLP, DenseMLP):
    """down(silu(gate(x)) * up(x)) (Shazeer 2020; Llama's naming): x [..., dim] -> [..., dim]."""

    def __init__(
        self, options: declared.SwiGLUMLP.Options, *, dim: int, dropout: float = 0.0
    ) -> None:
        super().__init__()
        hidden = self.hidden_of(options, dim)
        self.gate_proj = nn.Linear(dim, hidden, bias=options.bias)
        self.up_proj = nn.Linear(dim, hidden, bias=options.bias)
        self.down_proj = nn.Linear(hidden, dim, bias=options.bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)))

    @classmethod
    def grouped_forward(
        cls, experts: Sequence["SwiGLUMLP"], x: torch.Tensor, offs: torch.Tensor
    ) -> torch.Tensor:
        """Each expert's forward on its rows: x [N, dim] grouped by offs [E] (int32) -> [N, dim]."""
        # gate and up in one grouped GEMM of width 2·hidden (Mixtral's gate_up_proj), then split;
        # one stack of [gate_0, up_0, gate_1, ...] viewed as [E, 2·hidden, dim] copies them once
        pairs = [w for e in experts for w in (e.gate_proj.weight, e.up_proj.weight)]
        gate_up = torch.stack(pairs).view(len(experts), -1, x.size(-1))
        gate, up = grouped_linear(x, gate_up, offs).chunk(2, dim=-1)
        down = torch.stack([e.down_proj.weight for e in experts])
        out = grouped_linear(F.silu(gate) * up, down, offs)
        return experts[0].dropout(out)
