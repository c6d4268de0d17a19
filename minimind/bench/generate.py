"""generate suite: greedy decoding with the static KV cache, the dynamic one, and no cache.

MiniMind2-small (26m preset) decodes 256 new tokens after a 32-token prompt, batch 1, in eval
mode (quick: the tiny preset, 112 new tokens after 16). Without a cache, step t re-encodes all
32 + t tokens, so the cost grows quadratically in the tokens generated; with one, each step
encodes one token. The dynamic cache grows by concatenation; the static one is preallocated, and
on CUDA its one-token step is compiled with CUDA graphs (`compile_decode`), so that a token costs
a graph replay instead of one launch per kernel. On the CPU the static step runs eager. The three
run in alternation in the same rounds, each candidate one whole generation.
"""

from __future__ import annotations

import torch

from minimind.bench.context import BenchContext
from minimind.bench.results import Row, Target
from minimind.model.config import ModelConfig
from minimind.model.generation import GREEDY
from minimind.model.lm import MiniMindLM
from minimind.training.timing import interleave, median, paired_ratio, warm_up

SUITE = "generate"
CACHES = ("static", "dynamic", "none")


def run(ctx: BenchContext) -> list[Row]:
    preset, prompt_len, new_tokens = ("tiny", 16, 112) if ctx.quick else ("minimind-26m", 32, 256)
    config = ModelConfig.preset(preset, max_seq_len=prompt_len + new_tokens)
    device = ctx.device
    torch.manual_seed(0)
    with device:
        model = MiniMindLM(config).eval()
    prompt = torch.randint(0, config.vocab_size, (1, prompt_len), device=device)
    compiled = device.type == "cuda"

    def decoder(cache: str):
        def decode() -> torch.Tensor:
            tokens = model.generate(
                prompt,
                new_tokens,
                GREEDY,
                cache=cache,
                compile_decode=compiled and cache == "static",
            )
            assert isinstance(tokens, torch.Tensor)  # not streamed: the whole sequence
            return tokens

        return decode

    candidates = {cache: decoder(cache) for cache in CACHES}
    compile_s = None
    if compiled:
        ctx.log(f"[generate] {preset}: compiling the static decode step")
        compile_s = warm_up(candidates["static"], device)
    reference = candidates["none"]()
    for cache in ("static", "dynamic"):
        if not torch.equal(candidates[cache](), reference):
            # eager caches must match exactly (the tests prove it); a compiled step's kernels may
            # round differently and flip a near tie
            message = f"greedy decoding with the {cache} cache differs from no cache"
            if compiled and cache == "static":
                ctx.log(f"[generate] warning: {message}")
            else:
                raise RuntimeError(message)
    ctx.log(f"[generate] {preset}, {new_tokens} new tokens: 3 candidates x {ctx.rounds} rounds")
    times = interleave(candidates, device, ctx.rounds, ctx.warmup)
    rates = {cache: new_tokens / median(times[cache]) for cache in CACHES}
    static = "static (compiled)" if compiled else "static (eager)"
    detail = "; ".join(
        f"{static if cache == 'static' else cache} {rates[cache]:,.1f} tok/s" for cache in CACHES
    )
    if compile_s is not None:
        detail += f"; first call (compiling) {compile_s:.1f} s"
    case = f"{preset}, {new_tokens} new tokens, batch 1"
    gpu_target = compiled and not ctx.quick
    rows = [
        Row(
            SUITE,
            f"{case}: static KV cache / no cache speedup",
            paired_ratio(times["none"], times["static"]),
            "x",
            Target(">=", 5.0),
            detail,
        ),
        Row(
            SUITE,
            f"{case}: static / dynamic KV cache speedup",
            paired_ratio(times["dynamic"], times["static"]),
            "x",
        ),
        Row(
            SUITE,
            f"{case}: dynamic KV cache / no cache speedup",
            paired_ratio(times["none"], times["dynamic"]),
            "x",
        ),
    ]
    if gpu_target:
        rows.append(
            Row(
                SUITE,
                f"{case}: static KV cache tokens/s",
                rates["static"],
                "tok/s",
                Target(">=", 2000.0),
            )
        )
    return rows
