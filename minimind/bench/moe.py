"""moe suite: the `moe` mlp's forward and backward against HF's MixtralSparseMoeBlock.

8 experts, top-2, 4096 tokens of width 256 (quick: 256 tokens of width 32), the same weights
(`to_hf_mixtral_moe`) and the same input and upstream gradient. HF is measured twice: its
per-expert loop ("eager", the standalone block's default and the baseline of the target) and its
`grouped_mm` kernel (what a transformers 5 model picks by default where torch has grouped_mm).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

import registry
from minimind.bench.context import BenchContext
from minimind.bench.results import Row, Target
from minimind.bench.timing import interleave, median, paired_ratio
from minimind.hf_interop import to_hf_mixtral_moe

SUITE = "moe"
N_EXPERTS, TOP_K = 8, 2


def run(ctx: BenchContext) -> list[Row]:
    tokens, dim = (256, 32) if ctx.quick else (4096, 256)
    device = ctx.device
    torch.manual_seed(0)
    with device:
        ours = registry.build(
            "mlp", {"name": "moe", "n_experts": N_EXPERTS, "top_k": TOP_K}, dim=dim, dropout=0.0
        )
    layers: dict[str, nn.Module] = {
        "minimind": ours,
        "HF eager": to_hf_mixtral_moe(ours, "eager"),
    }
    if hasattr(torch.nn.functional, "grouped_mm"):
        layers["HF grouped_mm"] = to_hf_mixtral_moe(ours, "grouped_mm")
    x = torch.randn(1, tokens, dim, device=device)
    upstream = torch.randn(1, tokens, dim, device=device)
    candidates = {name: _forward_backward(layer, x, upstream) for name, layer in layers.items()}
    ctx.log(f"[moe] {tokens} tokens, dim {dim}: {len(candidates)} candidates x {ctx.rounds} rounds")
    times = interleave(candidates, device, ctx.rounds, ctx.warmup)
    target = Target(">=", 2.0 if device.type == "cuda" else 1.0)

    def ms(name: str) -> str:
        return f"{name} {median(times[name]) * 1e3:,.1f} ms"

    rows = [
        Row(
            SUITE,
            f"{N_EXPERTS} experts top-{TOP_K}, {tokens} tokens: fwd+bwd minimind / HF eager",
            paired_ratio(times["HF eager"], times["minimind"]),
            "x",
            target,
            f"{ms('minimind')}; {ms('HF eager')}",
        )
    ]
    if "HF grouped_mm" in times:
        rows.append(
            Row(
                SUITE,
                f"{N_EXPERTS} experts top-{TOP_K}, {tokens} tokens: fwd+bwd minimind / HF grouped_mm",
                paired_ratio(times["HF grouped_mm"], times["minimind"]),
                "x",
                detail=ms("HF grouped_mm"),
            )
        )
    return rows


def _forward_backward(
    layer: nn.Module, x: torch.Tensor, upstream: torch.Tensor
) -> Callable[[], None]:
    """x [1, N, dim] -> layer -> backward of `upstream` [1, N, dim] into the weights and x."""
    x = x.clone().requires_grad_(True)
    params = [x, *layer.parameters()]

    def step() -> None:
        layer(x).backward(upstream)
        for p in params:
            p.grad = None

    return step
