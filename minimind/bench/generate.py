"""generate suite: greedy decoding with the KV cache against recomputing the whole context.

MiniMind2-small (26m preset) decodes 256 new tokens after a 32-token prompt, batch 1, in eval
mode (quick: the tiny preset, 16 new tokens after 8). Without the cache, step t re-encodes all 32 + t
tokens, so the cost grows quadratically in the tokens generated; with it, each step encodes one.
"""

from __future__ import annotations

import torch

from minimind.bench.context import BenchContext
from minimind.bench.results import Row, Target
from minimind.bench.timing import interleave, median, paired_ratio
from minimind.config import ModelConfig
from minimind.generation import GREEDY
from minimind.model import MiniMindLM

SUITE = "generate"


def run(ctx: BenchContext) -> list[Row]:
    preset, prompt_len, new_tokens = ("tiny", 8, 16) if ctx.quick else ("minimind-26m", 32, 256)
    config = ModelConfig.preset(preset, max_seq_len=prompt_len + new_tokens)
    torch.manual_seed(0)
    with ctx.device:
        model = MiniMindLM(config).eval()
    prompt = torch.randint(0, config.vocab_size, (1, prompt_len), device=ctx.device)

    def decode(cache: str) -> torch.Tensor:
        return model.generate(prompt, new_tokens, GREEDY, cache=cache)

    if not torch.equal(decode("dynamic"), decode("none")):
        raise RuntimeError("greedy decoding differs with and without the KV cache")
    candidates = {"cache": lambda: decode("dynamic"), "no cache": lambda: decode("none")}
    ctx.log(f"[generate] {preset}, {new_tokens} new tokens: 2 candidates x {ctx.rounds} rounds")
    times = interleave(candidates, ctx.device, ctx.rounds, ctx.warmup)

    def rate(name: str) -> str:
        return f"{name} {new_tokens / median(times[name]):,.1f} tok/s"

    return [
        Row(
            SUITE,
            f"{preset}, {new_tokens} new tokens: KV cache / no cache speedup",
            paired_ratio(times["no cache"], times["cache"]),
            "x",
            Target(">=", 5.0),
            f"{rate('cache')}; {rate('no cache')}",
        )
    ]
