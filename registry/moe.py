"""mlp slot, `moe`: a dropless token-choice mixture of experts with optional shared experts.

Routing, per token x:
    p = softmax(router(x))                     [n_experts], in float32
    experts = top_k(p + b)                     b = 0, or the load-balancing bias (`balance: bias`)
    w_e = p_e / sum of p over the chosen       renormalised when top_k > 1 (Mixtral, MiniMind); with
                                               top_k = 1 the raw p_e is kept (Switch), else w = 1 and
                                               the router would get no gradient from the LM loss
    y = sum_e w_e expert_e(x) + sum_s shared_s(x)

Dispatch is grouped and dropless: the (token, expert) assignments are sorted by expert, each expert
runs once on its contiguous block (even an empty one, so every parameter takes part in backward
and DDP sees no unused parameters), and the weighted outputs are added back with `index_add`.
Every token is routed on its own, so the model stays causal.

Balancing (`balance`):
- `aux_loss` (Switch Transformer, MiniMind): aux = aux_loss_coef · n_experts · sum_i f_i · P_i,
  where f_i is the fraction of the N·top_k routed assignments that went to expert i (no gradient)
  and P_i is the mean router probability of expert i over the N tokens. It is 1·coef when balanced.
- `bias` (DeepSeek-V3 loss-free balancing): a per-expert bias b, added to p for the choice of
  experts only, is updated after each training-mode forward by b += rate · sign(mean load − load).
  The auxiliary loss is then zero. Under DDP the load is per rank.
"""

from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from annotated_types import Ge, Gt
from torch import nn

from registry.core import build, component_class, count_params, register, resolve
from registry.mlp import Hidden


@register("mlp", "moe")
class MoE(nn.Module):
    """Mixture of experts: x [B, T, dim] -> [B, T, dim]; sets `aux_loss` and `expert_load`."""

    @dataclass(frozen=True)
    class Options:
        n_experts: Annotated[int, Gt(0)] = 4
        top_k: Annotated[int, Gt(0)] = 2
        n_shared: Annotated[int, Ge(0)] = 0
        expert: str = "swiglu"
        hidden: Hidden = None
        aux_loss_coef: Annotated[float, Ge(0)] = 0.01
        balance: Literal["aux_loss", "bias"] = "aux_loss"
        bias_update_rate: Annotated[float, Gt(0)] = 1e-3

        def __post_init__(self) -> None:
            if self.top_k > self.n_experts:
                raise ValueError(f"top_k ({self.top_k}) must be <= n_experts ({self.n_experts})")
            resolve("mlp", self.expert)
            if issubclass(component_class("mlp", self.expert), MoE):
                raise ValueError("expert must be a dense mlp, not moe")

        def expert_spec(self) -> dict[str, object]:
            spec: dict[str, object] = {"name": self.expert}
            if self.hidden is not None:
                spec["hidden"] = self.hidden
            return spec

    def __init__(self, options: Options, *, dim: int, dropout: float) -> None:
        super().__init__()
        self.options = options
        self.router = nn.Linear(dim, options.n_experts, bias=False)
        expert = options.expert_spec()
        self.experts = nn.ModuleList(
            build("mlp", expert, dim=dim, dropout=0.0) for _ in range(options.n_experts)
        )
        self.shared = nn.ModuleList(
            build("mlp", expert, dim=dim, dropout=0.0) for _ in range(options.n_shared)
        )
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("expert_bias", torch.zeros(options.n_experts))
        self.aux_loss = torch.zeros(())
        self.expert_load: torch.Tensor | None = None

    @classmethod
    def param_count(cls, options: Options, *, dim: int, dropout: float) -> int:
        return cls._count(options, dim, options.n_experts)

    @classmethod
    def active_param_count(cls, options: Options, *, dim: int, dropout: float) -> int:
        return cls._count(options, dim, options.top_k)

    @staticmethod
    def _count(options: Options, dim: int, routed: int) -> int:
        expert = count_params("mlp", options.expert_spec(), dim=dim, dropout=0.0)
        return dim * options.n_experts + (routed + options.n_shared) * expert

    def route(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """tokens [N, dim] -> probabilities [N, E] (float32), experts [N, k], weights [N, k]."""
        probs = self.router(tokens).float().softmax(dim=-1)
        scores = probs + self.expert_bias if self.options.balance == "bias" else probs
        experts = scores.topk(self.options.top_k, dim=-1).indices
        weights = probs.gather(-1, experts)
        if self.options.top_k > 1:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return probs, experts, weights

    def dispatch(
        self, tokens: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Grouped dropless dispatch: tokens [N, dim], experts/weights [N, k] -> ([N, dim], counts [E])."""
        flat = experts.flatten()
        order = flat.argsort(stable=True)
        token_ids = order // self.options.top_k
        counts = torch.bincount(flat, minlength=self.options.n_experts)
        blocks = tokens[token_ids].split(counts.tolist())
        outputs = torch.cat(
            [expert(block) for expert, block in zip(self.experts, blocks, strict=True)]
        )
        outputs = outputs * weights.flatten()[order, None].to(outputs.dtype)
        combined = outputs.new_zeros(tokens.shape).index_add(0, token_ids, outputs)
        return combined, counts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.size(-1))
        probs, experts, weights = self.route(tokens)
        out, counts = self.dispatch(tokens, experts, weights)
        for shared in self.shared:
            out = out + shared(tokens)
        load = counts.float() / experts.numel()
        self.expert_load = load.detach()
        if self.options.balance == "aux_loss":
            n_experts = self.options.n_experts
            self.aux_loss = self.options.aux_loss_coef * n_experts * (load * probs.mean(0)).sum()
        else:
            self.aux_loss = probs.new_zeros(())
            if self.training:
                self._update_bias(counts)
        return self.dropout(out.view_as(x).to(x.dtype))

    @torch.no_grad()
    def _update_bias(self, counts: torch.Tensor) -> None:
        load = counts.float()
        self.expert_bias += self.options.bias_update_rate * torch.sign(load.mean() - load)
