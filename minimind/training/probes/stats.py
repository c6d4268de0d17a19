"""Pure functions behind the training probes: RMS, attention and output logit statistics, and
which group and layer a parameter belongs to. Each takes tensors and returns 0-dim tensors on
their device (nothing is read back to the host here)."""

from __future__ import annotations

import re

import torch

GROUPS = ("embedding", "attention", "mlp", "norms", "head", "other")
"""The parameter groups the gradient and update probes report, in the model's order (`other`:
a plugin's parameter outside these, so that no model is refused)."""

_LAYER = re.compile(r"^layers\.(\d+)\.")


def rms(x: torch.Tensor) -> torch.Tensor:
    """Root mean square over every element of x (any shape), in float32: a 0-dim tensor."""
    return x.float().pow(2).mean().sqrt()


def parameter_group(name: str) -> tuple[str, int | None]:
    """(group, layer index or None) of a `MiniMindLM` parameter by its qualified name.

    Every norm gain (block norms, QK-norms, the final norm) is in `norms`; the token and learned
    position embeddings in `embedding`; a router belongs to its `mlp`. A tied head has no name of
    its own (`named_parameters` lists the shared tensor once, as the embedding).
    """
    match = _LAYER.match(name)
    layer = int(match[1]) if match else None
    modules = name.split(".")[:-1]
    if any(part.endswith("norm") for part in modules):
        return "norms", layer
    if modules[0] in ("embed_tokens", "position"):
        return "embedding", layer
    if modules[0] == "lm_head":
        return "head", layer
    if layer is not None and len(modules) > 2 and modules[2] in ("attn", "mlp"):
        return ("attention" if modules[2] == "attn" else "mlp"), layer
    return "other", layer


def query_positions(length: int, queries: int, device: torch.device) -> torch.Tensor:
    """`queries` positions [Q] spread evenly over the second half of a window of `length` tokens
    (every position when fewer): late queries see many keys, so their entropy means something."""
    start = length // 2
    count = min(queries, length - start)
    return torch.linspace(start, length - 1, count, device=device).round().long().unique()


def attention_stats(
    q: torch.Tensor,
    k: torch.Tensor,
    queries: torch.Tensor,
    allowed: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(maximum pre-softmax logit, mean attention entropy in nats) of the sampled queries.

    q [B, H, T, hd] and k [B, Hkv, T, hd] as attention scores them (normalised and rotated;
    query head h reads key head h // (H / Hkv)); `queries` [Q] positions; `allowed` [B, 1, T, T]
    True where a query may attend (a document mask), None for plain causal attention. Logits
    are q·k · `scale`, the attention's own (None: 1/sqrt(hd), `F.scaled_dot_product_attention`'s
    default); the mean is over rows, heads and queries.
    """
    heads, kv_heads, length = q.size(1), k.size(1), k.size(2)
    k = k.float().repeat_interleave(heads // kv_heads, dim=1)
    scale = q.size(-1) ** -0.5 if scale is None else scale
    scores = q.float()[:, :, queries] @ k.transpose(-1, -2) * scale  # [B, H, Q, T]
    mask = torch.arange(length, device=q.device)[None, :] <= queries[:, None]  # [Q, T]
    if allowed is not None:
        mask = mask & allowed[:, :, queries]  # [B, 1, Q, T]
    scores = scores.masked_fill(~mask, float("-inf"))
    log_p = scores.log_softmax(dim=-1)
    entropy = -torch.where(mask, log_p.exp() * log_p, 0.0).sum(dim=-1)
    return scores.amax(), entropy.mean()


def output_stats(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(maximum logit, mean log-sum-exp over positions) of logits [B, T, V]: the extremes that
    z-loss (PaLM) pulls towards 0."""
    logits = logits.float()
    return logits.amax(), logits.logsumexp(dim=-1).mean()
