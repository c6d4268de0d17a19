"""mfu suite: achieved training FLOP/s against the device's peak, fp32 and bf16 autocast.

Achieved FLOP/s = `ModelConfig.flops_per_token(seq)` (6·N + attention; docs/architecture.md) × measured
tokens/s of eager training steps, the two precisions timed in alternation. Both divide by the
same peak, `minimind.training.metrics.device_peak_flops`, so that their MFUs compare: on the CPU the best
of the measured square-matmul peaks in fp32 and bf16 (cached per machine and thread count); on a
known GPU its datasheet dense bf16 peak, where the target is gpt2-small at seq 1024 compiled in
bf16 reaching 45 %.

A cached CPU peak measured while the machine was busy is too low (and the MFU too high), so a
second figure divides, round by round, by the rate of the fastest square matmul (fp32 or bf16)
timed in the same rounds as the steps: whatever load the machine carries weighs on both sides of
that ratio.

The step the device trains with (compiled bf16 on CUDA, eager fp32 elsewhere) runs once more with
the LM head and loss in chunks of tokens (`train.loss_chunk_tokens`), side by side: whether
never holding the whole logits pays for the head's recomputed matmul.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimind.bench.context import BenchContext
from minimind.bench.results import Row, Target
from minimind.bench.steps import Trainee
from minimind.model.config import ModelConfig
from minimind.model.lm import MiniMindLM
from minimind.training.metrics import device_peak_flops
from minimind.training.timing import interleave, median, paired_ratio, warm_up

SUITE = "mfu"
PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}
MATMUL_CALLS = 8
LOSS_CHUNK_TOKENS = 4096


def run(ctx: BenchContext) -> list[Row]:
    device = ctx.device
    if ctx.quick:
        preset, config, batch, seq = "tiny", ModelConfig.preset("tiny"), 2, 64
    elif device.type == "cuda":
        preset, config, batch, seq = "gpt2-small", ModelConfig.preset("gpt2-small"), 16, 1024
    else:
        preset, batch, seq = "minimind-26m", 8, 256
        config = ModelConfig.preset(preset, max_seq_len=seq)
    torch.manual_seed(0)
    with device:
        model = MiniMindLM(config)
    trainee = Trainee.create(model, config.vocab_size, batch, seq)
    compiled = torch.compile(model) if device.type == "cuda" and not ctx.quick else None
    if compiled is not None:
        # The GPU target is for the fast path: bf16, compiled, fused AdamW.
        step = trainee.step_fn(bf16=True, compiled=compiled)
        ctx.log(f"[mfu] {preset}: compiling")
        warm_up(step, device)
        candidates = {"bf16": step}
    else:
        candidates = {name: trainee.step_fn(bf16=name == "bf16") for name in PRECISIONS}
    size = 1024 if device.type == "cpu" else 4096
    for name in list(candidates):
        candidates[f"matmul {name}"] = _matmuls(size, PRECISIONS[name], device)
    # The step the device trains with, once more with the loss in chunks (`train.loss_chunk_tokens`).
    main = "bf16" if compiled is not None else "fp32"
    chunk = min(LOSS_CHUNK_TOKENS, trainee.tokens // 2)
    chunked = trainee.step_fn(bf16=main == "bf16", compiled=compiled, loss_chunk_tokens=chunk)
    if compiled is not None:
        ctx.log(f"[mfu] {preset}: compiling the chunked loss")
        warm_up(chunked, device)
    candidates["chunked"] = chunked
    ctx.log(f"[mfu] {preset}: {len(candidates)} candidates x {ctx.rounds} rounds")
    times = interleave(candidates, device, ctx.rounds, ctx.warmup, steps=ctx.steps)
    flops_per_token = config.flops_per_token(seq)
    gpu_target = device.type == "cuda" and not ctx.quick
    peak = device_peak_flops(device)
    matmul_flops = MATMUL_CALLS * 2 * size**3
    # Per round, the faster of the matmuls: the one peak both precisions are measured against.
    matmul_times = [times[f"matmul {name}"] for name in PRECISIONS if name in candidates]
    fastest_matmul = [min(round_times) for round_times in zip(*matmul_times, strict=True)]
    matmul_rate = matmul_flops / median(fastest_matmul)
    rows = []
    for name in PRECISIONS:
        if name not in candidates:
            continue
        tokens_per_s = trainee.tokens / median(times[name])
        achieved = flops_per_token * tokens_per_s
        # per round: (flops_per_token * tokens / step_s) / (matmul_flops / matmul_s)
        paired = paired_ratio(fastest_matmul, times[name])
        paired *= flops_per_token * trainee.tokens / matmul_flops
        rows += [
            Row(
                SUITE,
                f"{preset} seq {seq} {name}: MFU (device_peak_flops)",
                100 * achieved / peak,
                "%",
                Target(">=", 45.0) if gpu_target else None,
                f"{achieved / 1e9:,.1f} GFLOP/s of {peak / 1e9:,.1f} GFLOP/s peak (the device's "
                f"one peak for every precision); {tokens_per_s:,.0f} tok/s",
            ),
            Row(
                SUITE,
                f"{preset} seq {seq} {name}: MFU (fastest matmul in the same rounds)",
                100 * paired,
                "%",
                detail=f"{size}x{size} matmul {matmul_rate / 1e9:,.1f} GFLOP/s (median)",
            ),
        ]
    chunked_rate = trainee.tokens / median(times["chunked"])
    chunked_mfu = flops_per_token * chunked_rate / peak
    rows.append(
        Row(
            SUITE,
            f"{preset} seq {seq} {main}: tokens/s loss in chunks of {chunk} / whole logits",
            paired_ratio(times[main], times["chunked"]),
            "x",
            detail=f"chunked {chunked_rate:,.0f} tok/s, MFU {100 * chunked_mfu:.1f} %",
        )
    )
    return rows


def _matmuls(size: int, dtype: torch.dtype, device: torch.device) -> Callable[[], None]:
    """`MATMUL_CALLS` square matmuls [size, size] in `dtype`: the dense peak to compare with."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)

    def call() -> None:
        for _ in range(MATMUL_CALLS):
            torch.matmul(a, b)

    return call
