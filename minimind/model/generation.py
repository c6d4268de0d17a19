"""Sampling for `MiniMindLM.generate`: repetition penalty, temperature, top-k, top-p, EOS per row.

    options = SamplingOptions(temperature=0.8, top_k=50, eos_token_id=eos)   # checked here, once
    out = model.generate(prompt, 64, options, generator=generator)

Per step, on the last position's logits [B, vocab] in float32, in this order (as HF transformers):
repetition penalty over every token already in the row (prompt included), temperature, top-k,
top-p, then sampling (or argmax when temperature is 0).

The model's logits may be wider than its vocabulary (`ModelConfig.padded_vocab_size`); only the
first `config.vocab_size` are kept, so a padded id, which no tokenizer can decode, is never drawn.

The past tokens' keys and values come from a cache (`minimind.model.kv_cache`): `dynamic` grows by
concatenation, `static` is preallocated for the whole generation and keeps its shapes from token
to token (with `compile_decode`, its one-token step is compiled, as CUDA graphs on CUDA), `none`
re-encodes the context at every step. Nothing waits for the device between tokens except the
EOS check, every `SamplingOptions.eos_check_interval` tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class SamplingOptions:
    """How each new token is chosen; ValueError when made with an invalid value.

    - temperature: the logits are divided by it; 0 is greedy decoding (argmax);
    - top_k: keep the k most likely tokens (None: all);
    - top_p: keep the smallest set of most likely tokens whose probability reaches p (None: all);
    - repetition_penalty: CTRL's penalty on every token already in the row (1: none);
    - eos_token_id: a row that produced it is finished and continues with EOS (None: never);
    - eos_check_interval: generation stops once every row has finished, which is checked every
      this many tokens (a host sync each time), so up to interval - 1 steps of EOS may follow.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0
    eos_token_id: int | None = None
    eos_check_interval: int = 1

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.eos_check_interval < 1:
            raise ValueError(f"eos_check_interval must be >= 1, got {self.eos_check_interval}")


RANDOM_SAMPLING = SamplingOptions()
"""Plain sampling from the model's distribution (temperature 1, no filters, no EOS)."""
GREEDY = SamplingOptions(temperature=0.0)
"""Greedy decoding: the most likely token at every step."""
CACHE_KINDS = ("static", "dynamic", "none")
"""How generation keeps the past tokens' keys and values (module docstring)."""


class _SizedConfig(Protocol):
    max_seq_len: int
    vocab_size: int  # real token ids; logits beyond them are padding


class CausalLM(Protocol):
    """What generation needs from a model (MiniMindLM provides it)."""

    training: bool

    @property
    def config(self) -> _SizedConfig: ...  # read-only here: a model's own config type fits

    def __call__(self, input_ids: torch.Tensor, *, cache: object = None) -> object: ...
    def new_cache(self) -> object: ...
    def new_static_cache(self, capacity: int) -> object: ...
    def train(self, mode: bool = True) -> object: ...


def apply_repetition_penalty(
    logits: torch.Tensor, tokens: torch.Tensor, penalty: float
) -> torch.Tensor:
    """CTRL's penalty on every token in `tokens` [B, T]: positive logits [B, V] are divided by
    `penalty`, negative ones multiplied, so a penalty > 1 always makes a seen token less likely."""
    if penalty == 1.0:
        return logits
    seen = logits.gather(1, tokens)
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits.scatter(1, tokens, seen)


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits [B, V] of each row (ties with the k-th kept); -inf elsewhere."""
    kth = logits.topk(min(k, logits.size(-1)), dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter: keep the smallest set of most likely tokens whose probability reaches p.

    logits [B, V] -> [B, V] with -inf outside the nucleus; the most likely token is always kept.
    """
    ordered, order = logits.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # probability of the strictly more likely tokens
    drop_sorted = mass_before >= p
    drop_sorted[:, 0] = False
    drop = drop_sorted.scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def sample_next(
    logits: torch.Tensor, options: SamplingOptions, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The next token [B] from logits [B, V] by temperature, top-k and top-p of `options`
    (temperature 0: argmax); the repetition penalty is applied before, on the logits."""
    if options.temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / options.temperature
    if options.top_k is not None:
        logits = top_k_filter(logits, options.top_k)
    if options.top_p is not None:
        logits = top_p_filter(logits, options.top_p)
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def generate_tokens(
    model: CausalLM,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    sampling: SamplingOptions = RANDOM_SAMPLING,
    *,
    cache: str = "dynamic",
    compile_decode: bool = False,
    generator: torch.Generator | None = None,
) -> Iterator[torch.Tensor]:
    """Check the arguments now, then return an iterator of new tokens [B, 1], one per step.

    Each forward runs under no_grad in eval mode (restored afterwards, so that a stream can be
    consumed from a training loop). Once the context fills `max_seq_len`, the last max_seq_len
    tokens are re-encoded at each step (a sliding window); with and without a cache this is the
    same computation. A row that produced `sampling.eos_token_id` continues with EOS; the iterator
    stops when every row has finished (checked every `sampling.eos_check_interval` steps).
    `cache` is one of CACHE_KINDS; `compile_decode` (static cache only) compiles the one-token
    step with `torch.compile` (mode reduce-overhead, CUDA graphs, on CUDA).
    """
    if input_ids.dim() != 2 or input_ids.size(1) == 0:
        raise ValueError(f"input_ids must be [B, T] with T >= 1, got {tuple(input_ids.shape)}")
    vocab_size = model.config.vocab_size
    low, high = torch.aminmax(input_ids) if input_ids.numel() else (0, 0)
    if not 0 <= int(low) <= int(high) < vocab_size:
        # a padded id would embed silently (its row exists) and break the repetition penalty
        raise ValueError(f"input_ids must be in [0, vocab_size={vocab_size})")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if cache not in CACHE_KINDS:
        raise ValueError(f"cache must be one of {', '.join(CACHE_KINDS)}, got {cache!r}")
    if compile_decode and cache != "static":
        raise ValueError("compile_decode needs cache='static' (fixed shapes)")
    decode: Callable[..., object] = model
    if compile_decode:
        mode = "reduce-overhead" if input_ids.device.type == "cuda" else None
        decode = torch.compile(model, mode=mode, fullgraph=True)
    return _token_stream(model, decode, input_ids, max_new_tokens, sampling, cache, generator)


def _last_logits(
    model: CausalLM, forward: Callable[..., Any], input_ids: torch.Tensor, cache: object
) -> torch.Tensor:
    """Logits [B, vocab_size] of the last position (padded ids cut off) of `forward` (the model
    or its compiled decode step), in eval mode without autograd."""
    was_training = model.training
    if was_training:
        model.train(False)
    try:
        with torch.no_grad():
            logits = forward(input_ids, cache=cache).logits
            return logits[:, -1, : model.config.vocab_size].float()
    finally:
        if was_training:
            model.train(True)


def _token_stream(
    model: CausalLM,
    decode: Callable[..., object],
    ids: torch.Tensor,
    max_new_tokens: int,
    sampling: SamplingOptions,
    cache_kind: str,
    generator: torch.Generator | None,
) -> Iterator[torch.Tensor]:
    eos_token_id = sampling.eos_token_id
    window = model.config.max_seq_len
    finished = torch.zeros(ids.size(0), dtype=torch.bool, device=ids.device)
    cache: object = None
    static: object = None
    seen = 0  # tokens in the cache, counted on the host (a static cache's count is on the device)
    last = ids[:, -1:]  # the newest token [B, 1]: each sampled one replaces it
    for step in range(1, max_new_tokens + 1):
        if cache is None or seen >= window:
            context = ids[:, -window:]
            if cache_kind == "static":
                if static is None:  # every token fed to it: the prompt and all but the last new
                    static = model.new_static_cache(min(window, ids.size(1) + max_new_tokens - 1))
                static.reset()  # type: ignore[attr-defined]
                cache = static
            elif cache_kind == "dynamic":
                cache = model.new_cache()
            logits = _last_logits(model, model, context, cache)
            seen = context.size(1)
        else:
            # the last token as sampled, not `ids[:, -1:]`: a view of the growing `ids` has a new
            # stride every step, which recompiles the decode step and makes CUDA graphs record
            # a graph per token instead of replaying one
            logits = _last_logits(model, decode, last, cache)
            seen += 1
        logits = apply_repetition_penalty(logits, ids, sampling.repetition_penalty)
        token = sample_next(logits, sampling, generator)
        if eos_token_id is not None:
            token = token.masked_fill(finished, eos_token_id)
            finished |= token == eos_token_id
        last = token[:, None]
        ids = torch.cat((ids, last), dim=1)
        yield last
        if (
            eos_token_id is not None
            and step % sampling.eos_check_interval == 0
            and bool(finished.all())
        ):
            return
