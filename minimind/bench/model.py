"""model suite: a training step of a llama-shaped MiniMindLM against HF's LlamaForCausalLM.

Both models have the same dimensions and weights (`to_hf_llama`), train on the same batch with the
same AdamW, and are timed in alternation: eager fp32, eager bf16 autocast and, except in quick
mode, `torch.compile` (fp32 on the CPU, bf16 on CUDA). Reported per size: tokens/s ratios at equal
precision, peak memory (`minimind.training.memory`), bf16 against fp32, and compile against eager.

Also reported, without a target: what padding the vocabulary buys (`pad_vocab_multiple`), a
MiniMindLM training step at GPT-2's 50257 tokens padded to 50304 against the same unpadded, with
the tiny size's other dimensions, so that the LM head dominates the step.
"""

from __future__ import annotations

import torch

from minimind.bench.context import BenchContext
from minimind.bench.results import Row, Target
from minimind.bench.steps import Trainee
from minimind.hf.convert import to_hf_llama
from minimind.model.config import ModelConfig
from minimind.model.lm import MiniMindLM
from minimind.training.memory import step_peak_mib
from minimind.training.timing import interleave, median, paired_ratio, warm_up

SUITE = "model"

# name -> (config, batch, seq); "26m" is MiniMind2-small (25.8M parameters) at seq 256.
SIZES: dict[str, tuple[ModelConfig, int, int]] = {
    "tiny": (ModelConfig.preset("tiny"), 8, 256),
    "26m": (ModelConfig.preset("minimind-26m", max_seq_len=256), 8, 256),
}
QUICK = ("tiny", 2, 64)  # size, batch, seq
SIDES = ("minimind", "HF")
ODD_VOCAB = 50257  # GPT-2's vocabulary: 50304 when padded to a multiple of 64


def run(ctx: BenchContext) -> list[Row]:
    if ctx.quick:
        size, batch, seq = QUICK
        return [*_run_size(ctx, size, batch, seq), _padded_vocab_row(ctx, batch, seq)]
    rows = [
        row for size, (_, batch, seq) in SIZES.items() for row in _run_size(ctx, size, batch, seq)
    ]
    _, batch, seq = SIZES["tiny"]
    return [*rows, _padded_vocab_row(ctx, batch, seq)]


def _padded_vocab_row(ctx: BenchContext, batch: int, seq: int) -> Row:
    """tokens/s of a training step [batch, seq] with vocab ODD_VOCAB padded to a multiple of 64
    over the same step unpadded (pad_vocab_multiple 1); > 1: padding pays for its extra rows."""
    device = ctx.device
    bf16 = device.type == "cuda"  # the precision each device trains in; aligned GEMMs matter there
    configs = {
        name: SIZES["tiny"][0].replace(vocab_size=ODD_VOCAB, pad_vocab_multiple=multiple)
        for name, multiple in (("padded", 64), ("unpadded", 1))
    }
    steps = {}
    for name, config in configs.items():
        torch.manual_seed(0)
        with device:
            model = MiniMindLM(config)
        steps[name] = Trainee.create(model, ODD_VOCAB, batch, seq).step_fn(bf16=bf16)
    ctx.log(f"[model] vocab {ODD_VOCAB}: padded vs unpadded x {ctx.rounds} rounds")
    times = interleave(steps, device, ctx.rounds, ctx.warmup, steps=ctx.steps)
    tokens = batch * seq
    detail = "; ".join(
        f"{name} ({config.padded_vocab_size} rows) {tokens / median(times[name]):,.0f} tok/s"
        for name, config in configs.items()
    )
    return Row(
        SUITE,
        f"tiny vocab {ODD_VOCAB} {'bf16' if bf16 else 'fp32'}: tokens/s padded to "
        f"{configs['padded'].padded_vocab_size} / unpadded",
        paired_ratio(times["unpadded"], times["padded"]),
        "x",
        detail=detail,
    )


def _run_size(ctx: BenchContext, size: str, batch: int, seq: int) -> list[Row]:
    config = SIZES[size][0]
    device = ctx.device
    torch.manual_seed(0)
    with device:  # built in place (no CPU copy first)
        model = MiniMindLM(config)
    trainees = {
        "minimind": Trainee.create(model, config.vocab_size, batch, seq),
        "HF": Trainee.create(to_hf_llama(model), config.vocab_size, batch, seq),
    }
    candidates = {  # each comparison's two sides run next to each other in a round
        f"{side} {precision}": trainee.step_fn(bf16=precision == "bf16")
        for precision in ("fp32", "bf16")
        for side, trainee in trainees.items()
    }
    compile_bf16 = device.type == "cuda"  # compile at the precision each device trains in
    compile_s = {}
    if not ctx.quick:
        for side, trainee in trainees.items():
            step = trainee.step_fn(bf16=compile_bf16, compiled=torch.compile(trainee.model))
            ctx.log(f"[model] {size}: compiling {side}")
            compile_s[side] = warm_up(step, device)
            candidates[f"{side} compile"] = step
    ctx.log(f"[model] {size}: {len(candidates)} candidates x {ctx.rounds} rounds")
    times = interleave(candidates, device, ctx.rounds, ctx.warmup, steps=ctx.steps)
    memory = {}
    for name, step in candidates.items():
        side, mode = name.split()
        if mode != "compile":  # the target is on eager steps; compiled ones share their weights
            trainee = trainees[side]
            memory[name] = step_peak_mib(step, trainee.model, trainee.optimizer, device)
    tokens = batch * seq

    def rate(name: str) -> str:
        return f"{name} {tokens / median(times[name]):,.0f} tok/s"

    rows = []
    for precision in ("fp32", "bf16"):
        ours, theirs = f"minimind {precision}", f"HF {precision}"
        rows.append(
            Row(
                SUITE,
                f"{size} eager {precision}: tokens/s minimind / HF",
                paired_ratio(times[theirs], times[ours]),
                "x",
                Target(">=", 1.0),
                f"{rate(ours)}; {rate(theirs)}",
            )
        )
        rows.append(
            Row(
                SUITE,
                f"{size} eager {precision}: peak memory minimind / HF",
                memory[ours] / memory[theirs],
                "x",
                Target("<=", 1.0),
                f"minimind {memory[ours]:,.1f} MiB; HF {memory[theirs]:,.1f} MiB",
            )
        )
    for side in SIDES:
        rows.append(
            Row(
                SUITE,
                f"{size} {side}: bf16 autocast / fp32 speedup",
                paired_ratio(times[f"{side} fp32"], times[f"{side} bf16"]),
                "x",
                detail=f"{rate(f'{side} fp32')}; {rate(f'{side} bf16')}",
            )
        )
    eager = "bf16" if compile_bf16 else "fp32"
    for side in compile_s:
        rows.append(
            Row(
                SUITE,
                f"{size} {side}: compile / eager {eager} speedup",
                paired_ratio(times[f"{side} {eager}"], times[f"{side} compile"]),
                "x",
                detail=f"{rate(f'{side} compile')}; first call (compiling) {compile_s[side]:.1f} s",
            )
        )
    if compile_s and device.type == "cuda":
        rows.append(
            Row(
                SUITE,
                f"{size} minimind compile bf16 / HF eager bf16",
                paired_ratio(times["HF bf16"], times["minimind compile"]),
                "x",
                Target(">=", 1.3),
                f"{rate('minimind compile')}; {rate('HF bf16')}",
            )
        )
    return rows
