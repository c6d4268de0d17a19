"""moe suite: the `moe` mlp's forward and backward against HF's MixtralSparseMoeBlock.

8 experts, top-2, 4096 tokens of width 256 (quick: 256 tokens of width 32), the same weights
(`to_hf_mixtral_moe`) and the same input and upstream gradient. HF is measured twice: its
per-expert loop ("eager", the standalone block's default and the baseline of the target) and its
`grouped_mm` kernel (what a transformers 5 model picks by default where torch has grouped_mm).
Ours is measured with both dispatches where torch has grouped_mm: "minimind" is the layer as
built (`dispatch: auto`, so loop on the CPU and grouped_mm on CUDA) and carries the target; the
other dispatch is reported beside it without one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

import registry
from minimind.bench.context import BenchContext
from minimind.bench.results import Row, Target
from minimind.hf.convert import to_hf_mixtral_moe
from minimind.training.timing import interleave, median, paired_ratio
from registry.moe import MoE

SUITE = "moe"
N_EXPERTS, TOP_K = 8, 2


def run(ctx: BenchContext) -> list[Row]:
    tokens, dim = (256, 32) if ctx.quick else (4096, 256)
    device = ctx.device
    torch.manual_seed(0)
    ours = _build(dim, device, "auto")
    picked = ours.resolved_dispatch(device)
    layers: dict[str, nn.Module] = {"minimind": ours}
    other = _other_dispatch(ours, picked, ctx)
    if other is not None:
        layers[f"minimind {other}"] = _twin(ours, other, device)
    layers["HF eager"] = to_hf_mixtral_moe(ours, "eager")
    if hasattr(torch.nn.functional, "grouped_mm"):
        layers["HF grouped_mm"] = to_hf_mixtral_moe(ours, "grouped_mm")
    x = torch.randn(1, tokens, dim, device=device)
    upstream = torch.randn(1, tokens, dim, device=device)
    candidates = {name: _forward_backward(layer, x, upstream) for name, layer in layers.items()}
    ctx.log(f"[moe] {tokens} tokens, dim {dim}: {len(candidates)} candidates x {ctx.rounds} rounds")
    times = interleave(candidates, device, ctx.rounds, ctx.warmup, steps=ctx.steps)
    target = Target(">=", 2.0 if device.type == "cuda" else 1.0)

    def ms(name: str) -> str:
        return f"{name} {median(times[name]) * 1e3:,.1f} ms"

    def ratio(baseline: str, candidate: str) -> float:
        return paired_ratio(times[baseline], times[candidate])

    case = f"{N_EXPERTS} experts top-{TOP_K}, {tokens} tokens: fwd+bwd"
    rows = [
        Row(
            SUITE,
            f"{case} minimind / HF eager",
            ratio("HF eager", "minimind"),
            "x",
            target,
            f"{ms('minimind')} (dispatch auto: {picked}); {ms('HF eager')}",
        )
    ]
    if other is not None:
        name = f"minimind {other}"
        rows.append(
            Row(SUITE, f"{case} {name} / HF eager", ratio("HF eager", name), "x", detail=ms(name))
        )
    if "HF grouped_mm" in times:
        rows.append(
            Row(
                SUITE,
                f"{case} minimind / HF grouped_mm",
                ratio("HF grouped_mm", "minimind"),
                "x",
                detail=ms("HF grouped_mm"),
            )
        )
    return rows


def _build(dim: int, device: torch.device, dispatch: str) -> MoE:
    spec = {"name": "moe", "n_experts": N_EXPERTS, "top_k": TOP_K, "dispatch": dispatch}
    with device:
        moe = registry.build("mlp", spec, dim=dim, dropout=0.0)
    assert isinstance(moe, MoE)
    return moe


def _other_dispatch(ours: MoE, picked: str, ctx: BenchContext) -> str | None:
    """The dispatch that `auto` did not pick, where it can run on these experts."""
    if ours.grouped_mm_problem is not None:
        ctx.log(f"[moe] no grouped_mm dispatch: {ours.grouped_mm_problem}")
        return None
    return "loop" if picked == "grouped_mm" else "grouped_mm"


def _twin(ours: MoE, dispatch: str, device: torch.device) -> MoE:
    """The same layer and weights as `ours`, with another dispatch."""
    twin = _build(ours.router.in_features, device, dispatch)
    twin.load_state_dict(ours.state_dict())
    return twin


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
