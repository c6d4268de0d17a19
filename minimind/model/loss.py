"""The LM loss, over whole logits or in chunks of tokens that never hold every token's logits.

    loss_sum = chunked_loss_sum(hidden, lm_head.weight, targets, 4096)   # == token_loss_sum(...)

The full path computes logits [N, V] and their float32 copy for the loss: at GPT-2's 50304-wide
vocabulary and 16k tokens a step, 3.3 GB in float32, kept for the backward, plus its gradient.
The chunked path computes the LM-head matmul and the loss per chunk of `chunk_tokens` tokens under
activation checkpointing (`torch.utils.checkpoint`), so the forward keeps no logits and the
backward recomputes one chunk's logits at a time: at most one chunk's [chunk_tokens, V] is alive.
The price is the head's matmul done twice (its forward again in the backward).

`loss_sum` is the per-chunk loss of logits (float32) and targets, summed over tokens, so that a
term computed per token (a soft cap on the logits, a z-loss) applies chunk by chunk alike.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100
"""Targets equal to it add nothing to the loss (the last position, padding)."""

LossSum = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(logits [n, V] float32, targets [n]) -> the n tokens' losses summed: 0-dim, or [k] for k terms
summed apart (`loss_sums`)."""


def soft_cap(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """cap·tanh(logits / cap): any shape; smooth, near the identity for |logits| << cap."""
    return cap * torch.tanh(logits / cap)


def token_loss_sum(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy summed over tokens: logits [n, V] (float32), targets [n] with IGNORE_INDEX
    skipped -> 0-dim."""
    return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")


def loss_sums(
    logits: torch.Tensor,
    targets: torch.Tensor,
    softcap: float | None = None,
    with_z_loss: bool = False,
) -> torch.Tensor:
    """logits [n, V] (float32), targets [n] -> the cross-entropy summed over the targets that
    are not IGNORE_INDEX (0-dim); with `with_z_loss`, [2]: that and logsumexp(logits)² summed
    over the same targets (the z-loss, PaLM).

    `softcap` caps the logits first (`soft_cap`); the z-loss reads the capped logits, the ones the
    softmax sees. It pulls the softmax normaliser towards 1, which keeps logits from drifting.
    """
    if softcap is not None:
        logits = soft_cap(logits, softcap)
    cross_entropy = token_loss_sum(logits, targets)
    if not with_z_loss:
        return cross_entropy
    z_sum = logits[targets != IGNORE_INDEX].logsumexp(dim=-1).square().sum()
    return torch.stack([cross_entropy, z_sum])


def _chunk(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, loss_sum: LossSum
) -> torch.Tensor:
    return loss_sum(F.linear(hidden, weight).float(), targets)


def chunked_loss_sum(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_tokens: int,
    loss_sum: LossSum = token_loss_sum,
) -> torch.Tensor:
    """`loss_sum(F.linear(hidden, weight).float(), targets)` computed `chunk_tokens` tokens at a
    time, each chunk checkpointed: hidden [N, D], weight [V, D] (the LM head), targets [N] ->
    0-dim float32 (or [k] when `loss_sum` returns k sums).

    The gradient reaches `hidden` and `weight` as through the full computation.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    # split, not slicing: one backward node gathers every chunk's gradient into [N, D] once
    # (a slice's backward would allocate a full-size zero gradient per chunk).
    chunks = zip(hidden.split(chunk_tokens), targets.split(chunk_tokens), strict=True)
    parts = [
        checkpoint(_chunk, h, weight, t, loss_sum, use_reentrant=False)
        if torch.is_grad_enabled()
        else _chunk(h, weight, t, loss_sum)
        for h, t in chunks
    ]
    return torch.stack(parts).sum(dim=0)
