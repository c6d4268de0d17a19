"""The forward probes: one extra forward of the plain (uncompiled) model on a fixed batch, in
eval mode and without gradients, with hooks on every block and every attention.

Per layer i it measures the residual stream's RMS after the block (`resid_rms/layer<i>`), the
block's output RMS over its input RMS (`block_gain/layer<i>`), the attention's maximum
pre-softmax logit and mean entropy over a sample of queries (`attn_max_logit/layer<i>`,
`attn_entropy/layer<i>`); for the model, the output's maximum logit and mean log-sum-exp
(`out_max_logit`, `out_lse`) and, with MoE layers, each expert's share of the routed
assignments (`moe_load/layer<j>/expert<e>`, from `MiniMindLM.moe_load`).

Why a separate forward: hooks on the training forward would have to be added and removed
around probed steps, which recompiles a compiled model; this forward runs the eager model, so
the compiled one never sees a hook. In eval mode it draws no random numbers (no dropout), so a
run trains the same with probes on or off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from minimind.model.lm import MiniMindLM
from minimind.training.probes.stats import attention_stats, output_stats, query_positions, rms
from registry.attention import CausalSelfAttention

Measurements = dict[str, torch.Tensor]


def _block_hook(out: Measurements, layer: int) -> Callable[..., None]:
    def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
        resid = rms(output)
        out[f"resid_rms/layer{layer}"] = resid
        out[f"block_gain/layer{layer}"] = resid / rms(args[0])

    return hook


def _attention_hook(out: Measurements, layer: int, queries: int) -> Callable[..., None]:
    def hook(module: CausalSelfAttention, args: tuple[Any, ...]) -> None:
        x, rotate = args[0], args[1]
        doc_mask = args[3] if len(args) > 3 else None
        q, k, _ = module.project(x, rotate)
        positions = query_positions(q.size(2), queries, q.device)
        allowed = doc_mask.dense() if doc_mask is not None else None
        top, entropy = attention_stats(q, k, positions, allowed, module.scale)
        out[f"attn_max_logit/layer{layer}"] = top
        out[f"attn_entropy/layer{layer}"] = entropy

    return hook


@torch.no_grad()
def forward_probes(
    model: MiniMindLM, x: torch.Tensor, doc_ids: torch.Tensor | None, queries: int
) -> Measurements:
    """Run `model` (a `MiniMindLM`, not compiled) on tokens x [B, T] and return its
    measurements as 0-dim device tensors, keyed without the `probe/` prefix. The model's
    train/eval mode is restored."""
    out: Measurements = {}
    handles = []
    for i, layer in enumerate(model.layers):
        handles.append(layer.register_forward_hook(_block_hook(out, i)))
        attention = layer.get_submodule("attn")  # every block keeps its attention as `attn`
        handles.append(attention.register_forward_pre_hook(_attention_hook(out, i, queries)))
    was_training = model.training
    model.eval()
    try:
        logits = model(x, doc_ids=doc_ids).logits
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    out["out_max_logit"], out["out_lse"] = output_stats(logits)
    load = model.moe_load()
    if load is not None:
        for j, shares in enumerate(load):
            for e, share in enumerate(shares):
                out[f"moe_load/layer{j}/expert{e}"] = share
    return out
