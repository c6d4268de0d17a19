"""mlp slot, `moe`: a dropless token-choice mixture of experts with optional shared experts.

Routing, per token x:
    p = softmax(router(x))                     [n_experts], in float32
    experts = top_k(p + b)                     b = 0, or the load-balancing bias (`balance: bias`)
    w_e = p_e / sum of p over the chosen       renormalised when top_k > 1 (Mixtral, MiniMind); with
                                               top_k = 1 the raw p_e is kept (Switch), else w = 1 and
                                               the router would get no gradient from the LM loss
    y = sum_e w_e expert_e(x) + sum_s shared_s(x)

Dispatch is grouped and dropless: the N·top_k (token, expert) assignments are sorted by expert, the
experts run on their contiguous blocks of rows, and the weighted outputs are added back with
`index_add`. Every token is routed on its own, so the model stays causal. Two ways to run the
experts (`dispatch`), with the same parameters and the same results:
- `loop`: each expert once on its block (even an empty one, so every parameter takes part in
  backward and DDP sees no unused parameters). Splitting into blocks reads the counts on the host,
  a device sync on a GPU.
- `grouped_mm`: all experts in one `torch.nn.functional.grouped_mm` per weight matrix, the blocks
  given by the device-side cumulative counts, so no sync (the expert kind's `grouped_forward`,
  `registry/mlp.py`). An empty expert's weights get zero gradients. Needs a torch with grouped_mm,
  experts without bias, and dim and the expert width multiples of 8 (16-byte rows in bf16). On CUDA
  the fast kernel wants bf16 (autocast) and sm90+; otherwise torch falls back to a loop of matmuls.
- `auto` (default): grouped_mm on CUDA when the experts allow it, else loop (on the CPU the loop
  measured faster: `minimind bench --suite moe`).

Balancing (`balance`):
- `aux_loss` (Switch Transformer, MiniMind): aux = aux_loss_coef · n_experts · sum_i f_i · P_i,
  where f_i is the fraction of the N·top_k routed assignments that went to expert i (no gradient)
  and P_i is the mean router probability of expert i over the N tokens. It is 1·coef when balanced.
  `aux_scope` says over which tokens f and P are taken: `batch` (Switch, Mixtral) over all N tokens
  of the batch; `sequence` (MiniMind2-MoE's `seq_aux`, DeepSeek's sequence-wise balance loss) per
  sequence of the batch, the B sequences' losses then averaged. The two agree at batch 1.
- `bias` (DeepSeek-V3 loss-free balancing): a per-expert bias b, added to p for the choice of
  experts only, is updated after each training-mode forward by b += rate · sign(mean load − load).
  The auxiliary loss is then zero. Under DDP the load is per rank.

Options, checks and counts are declared in `registry/declarations/moe.py`.
"""

from typing import Literal

import torch
from torch import nn

from registry.core import build
from registry.declarations import moe as declared
from registry.declarations.moe import grouped_mm_misaligned, grouped_mm_unsupported


class MoE(declared.MoE, nn.Module):
    """Mixture of experts: x [B, T, dim] -> [B, T, dim]; sets `aux_loss` (0-dim) and
    `expert_load` ([n_experts], the fraction of the routed assignments each expert took)."""

    expert_bias: torch.Tensor  # [n_experts], a buffer

    def __init__(self, options: declared.MoE.Options, *, dim: int, dropout: float = 0.0) -> None:
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
        # None when grouped_mm can run these experts, else why not: decides `auto`. An explicit
        # `grouped_mm` that cannot run was refused before (Options, and check_dims in `build`).
        self.grouped_mm_problem = grouped_mm_unsupported(expert) or grouped_mm_misaligned(
            dim, self.experts[0]
        )

    def route(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """tokens [N, dim] -> probabilities [N, E] (float32), experts [N, k], weights [N, k]."""
        probs = self.router(tokens).float().softmax(dim=-1)
        scores = probs + self.expert_bias if self.options.balance == "bias" else probs
        experts = scores.topk(self.options.top_k, dim=-1).indices
        weights = probs.gather(-1, experts)
        if self.options.top_k > 1:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return probs, experts, weights

    def resolved_dispatch(self, device: torch.device) -> Literal["loop", "grouped_mm"]:
        """The dispatch that inputs on `device` get: `auto` is grouped_mm on CUDA where it can run."""
        if self.options.dispatch != "auto":
            return self.options.dispatch
        grouped = device.type == "cuda" and self.grouped_mm_problem is None
        return "grouped_mm" if grouped else "loop"

    def dispatch(
        self, tokens: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Dropless dispatch: tokens [N, dim], experts/weights [N, k] -> ([N, dim], counts [E]).

        counts [E] (int64, on the device): the assignments each expert took.
        """
        flat = experts.flatten()  # [N·k], assignment i is token i // k
        order = flat.argsort(stable=True)
        token_ids = order // self.options.top_k
        # not torch.bincount: on CUDA it reads its input's max on the host
        counts = flat.new_zeros(self.options.n_experts).index_add_(0, flat, torch.ones_like(flat))
        rows = tokens[token_ids]  # [N·k, dim], grouped by expert
        if self.resolved_dispatch(tokens.device) == "grouped_mm":
            outputs = self._run_grouped(rows, counts)
        else:
            outputs = self._run_loop(rows, counts)
        return self._combine(outputs, weights.flatten()[order], token_ids, tokens.shape), counts

    def _run_loop(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """rows [N·k, dim] grouped by expert, counts [E] -> [N·k, dim]; syncs for the counts."""
        blocks = rows.split(counts.tolist())
        return torch.cat(
            [expert(block) for expert, block in zip(self.experts, blocks, strict=True)]
        )

    def _run_grouped(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """rows [N·k, dim] grouped by expert, counts [E] -> [N·k, dim], without a host sync."""
        offs = counts.cumsum(0).to(torch.int32)  # [E], end of each expert's block
        kind = type(self.experts[0])  # an mlp kind with `grouped_forward` (grouped_mm_unsupported)
        return kind.grouped_forward(list(self.experts), rows, offs)  # type: ignore[attr-defined]

    @staticmethod
    def _combine(
        outputs: torch.Tensor,
        weights: torch.Tensor,
        token_ids: torch.Tensor,
        shape: torch.Size,
    ) -> torch.Tensor:
        """Σ over each token's assignments of weight · output: outputs [N·k, dim], weights and
        token_ids [N·k] (in the order of the outputs) -> [N, dim] (`shape`)."""
        outputs = outputs * weights[:, None].to(outputs.dtype)
        return outputs.new_zeros(shape).index_add(0, token_ids, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.size(-1))
        probs, experts, weights = self.route(tokens)
        out, counts = self.dispatch(tokens, experts, weights)
        for shared in self.shared:
            out = out + shared(tokens)
        load = counts.float() / experts.numel()
        self.expert_load = load.detach()
        if self.options.balance == "aux_loss":
            self.aux_loss = self._balance_loss(probs, experts, load, x.shape[:-2].numel())
        else:
            self.aux_loss = probs.new_zeros(())
            if self.training:
                self._update_bias(counts)
        return self.dropout(out.view_as(x).to(x.dtype))

    def _balance_loss(
        self, probs: torch.Tensor, experts: torch.Tensor, load: torch.Tensor, n_sequences: int
    ) -> torch.Tensor:
        """coef · E · Σ_i f_i · P_i over the batch, or its mean over the sequences (`aux_scope`).

        probs [N, E], experts [N, k], load [E] (the batch's f), N = n_sequences · T -> 0-dim.
        An input without a batch dimension is one sequence.
        """
        n_experts = self.options.n_experts
        if self.options.aux_scope == "batch":
            balance = (load * probs.mean(0)).sum()
        else:
            chosen = experts.view(n_sequences, -1)  # [B, T·k]
            # scatter_add, not one_hot: one_hot reads the ids' range on the host
            counts = probs.new_zeros(n_sequences, n_experts).scatter_add_(
                1, chosen, torch.ones_like(chosen, dtype=probs.dtype)
            )
            seq_load = counts / chosen.size(1)  # [B, E]
            seq_probs = probs.view(n_sequences, -1, n_experts).mean(1)  # [B, E]
            balance = (seq_load * seq_probs).sum(-1).mean()
        return self.options.aux_loss_coef * n_experts * balance

    @torch.no_grad()
    def _update_bias(self, counts: torch.Tensor) -> None:
        load = counts.float()
        self.expert_bias += self.options.bias_update_rate * torch.sign(load.mean() - load)
