"""generate and its sampling helpers, against HF transformers' logits processors and by hand."""

import types

import pytest
import torch
from torch._dynamo.utils import counters
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from minimind import MiniMindLM, ModelConfig
from minimind.model.generation import (
    CACHE_KINDS,
    GREEDY,
    SamplingOptions,
    apply_repetition_penalty,
    generate_tokens,
    sample_next,
    top_k_filter,
    top_p_filter,
)

SMALL = dict(vocab_size=61, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=24)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny ops, one thread


@pytest.fixture(scope="module")
def model() -> MiniMindLM:
    torch.manual_seed(0)
    return MiniMindLM(ModelConfig(**SMALL)).eval()


@pytest.fixture
def prompt() -> torch.Tensor:
    return torch.randint(0, 61, (3, 5), generator=torch.Generator().manual_seed(0))


# --- greedy and cache ---------------------------------------------------------------------------


def test_greedy_is_deterministic_and_follows_the_argmax_chain(model, prompt):
    first = model.generate(prompt, 8, GREEDY)
    assert torch.equal(first, model.generate(prompt, 8, GREEDY))
    assert torch.equal(first[:, :5], prompt) and first.shape == (3, 13)
    ids = prompt
    with torch.no_grad():
        for _ in range(8):
            logits = model(ids).logits[:, -1, :61]  # the padded ids (61..63) are never drawn
            ids = torch.cat((ids, logits.argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(first, ids)


def test_top_k_1_sampling_is_greedy(model, prompt):
    greedy = model.generate(prompt, 6, GREEDY)
    assert torch.equal(model.generate(prompt, 6, SamplingOptions(temperature=1.3, top_k=1)), greedy)


def test_sampling_is_reproducible_with_a_generator(model, prompt):
    def sample(seed):
        generator = torch.Generator().manual_seed(seed)
        return model.generate(prompt, 10, generator=generator)

    assert torch.equal(sample(3), sample(3))
    assert not torch.equal(sample(3), sample(4))


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_sliding_window_beyond_max_seq_len_with_and_without_cache(model, prompt, cache):
    cached = model.generate(prompt, 30, GREEDY, cache=cache)  # 35 > max_seq_len 24
    uncached = model.generate(prompt, 30, GREEDY, cache="none")
    assert cached.shape == (3, 35)
    assert torch.equal(cached, uncached)


def test_static_and_dynamic_caches_sample_the_same_tokens(model, prompt):
    def sample(cache):
        generator = torch.Generator().manual_seed(5)
        options = SamplingOptions(temperature=0.9, top_k=20, repetition_penalty=1.2)
        return model.generate(prompt, 12, options, cache=cache, generator=generator)

    assert torch.equal(sample("static"), sample("dynamic"))


def test_static_cache_keeps_its_buffers_and_refuses_to_write_past_its_capacity(model, prompt):
    cache = model.new_static_cache(6)
    with torch.no_grad():
        first = model(prompt, cache=cache).logits
        buffer = cache.layers[0].k
        assert buffer.shape == (3, 2, 6, 8) and len(cache) == 5  # [B, Hkv, capacity, hd]
        model(prompt[:, :1], cache=cache)
        with pytest.raises(IndexError):
            model(prompt[:, :1], cache=cache)  # a 7th token
        cache.reset()
        again = model(prompt, cache=cache).logits
    assert cache.layers[0].k is buffer and buffer.data_ptr() == cache.layers[0].k.data_ptr()
    torch.testing.assert_close(again, first, rtol=0, atol=0)


def test_cache_options_are_checked(model, prompt):
    with pytest.raises(ValueError, match="cache must be one of"):
        model.generate(prompt, 3, cache="paged")
    with pytest.raises(ValueError, match="compile_decode needs cache='static'"):
        model.generate(prompt, 3, cache="dynamic", compile_decode=True)
    with pytest.raises(ValueError, match="capacity"):
        model.new_static_cache(25)  # beyond max_seq_len 24


@pytest.mark.slow
def test_compiled_static_decode_generates_what_the_uncached_model_does(model, prompt):
    """The compiled one-token step (inductor here; CUDA graphs on CUDA) through the sliding
    window, greedy and sampled, compiled once: a step that recompiled per token (a new stride
    each step, say) would make CUDA graphs record a graph per token."""
    torch._dynamo.reset()
    counters.clear()
    greedy = model.generate(prompt, 30, GREEDY, cache="static", compile_decode=True)
    assert counters["stats"]["unique_graphs"] == 1
    assert torch.equal(greedy, model.generate(prompt, 30, GREEDY, cache="none"))
    options = SamplingOptions(temperature=0.8, top_k=10)

    def sample(**how):
        return model.generate(
            prompt, 12, options, generator=torch.Generator().manual_seed(1), **how
        )

    assert torch.equal(sample(cache="static", compile_decode=True), sample(cache="dynamic"))


def test_static_decode_step_is_one_graph_that_never_recompiles(model, prompt):
    """Traced by dynamo (the eager backend: no code generation), the one-token step has no
    graph break (fullgraph) and is compiled once for every position."""
    torch._dynamo.reset()
    compiles = []

    def backend(graph, example_inputs):
        compiles.append(graph)
        return graph.forward

    step = torch.compile(model, backend=backend, fullgraph=True)
    cache = model.new_static_cache(12)
    with torch.no_grad():
        model(prompt, cache=cache)  # prefill, eager
        expected_cache = model.new_cache()
        model(prompt, cache=expected_cache)  # the reference: the dynamic cache, eager
        ids = prompt
        for _ in range(6):
            token = (ids[:, -1:] + 7) % 61
            got = step(token, cache=cache).logits
            torch.testing.assert_close(got, model(token, cache=expected_cache).logits)
            ids = torch.cat((ids, token), dim=1)
    assert len(compiles) == 1
    torch._dynamo.reset()


def test_generate_restores_training_mode_and_tracks_no_gradients(prompt):
    torch.manual_seed(0)
    model = MiniMindLM(ModelConfig(**SMALL, dropout=0.5))
    model.train()
    first = model.generate(prompt, 5, GREEDY)
    assert model.training
    assert torch.equal(first, model.generate(prompt, 5, GREEDY))  # dropout was off
    assert not first.requires_grad
    assert all(p.grad is None for p in model.parameters())


# --- streaming ----------------------------------------------------------------------------------


def test_stream_yields_one_token_per_step(model, prompt):
    stream = model.generate(prompt, 7, GREEDY, stream=True)
    assert isinstance(stream, types.GeneratorType)
    chunks = []
    for chunk in stream:
        assert chunk.shape == (3, 1)
        chunks.append(chunk)
    assert len(chunks) == 7
    assert torch.equal(torch.cat([prompt, *chunks], 1), model.generate(prompt, 7, GREEDY))


def test_stream_is_lazy(prompt):
    calls = []
    stub = CountingLM(vocab=10)
    original = stub.forward
    stub.forward = lambda *a, **k: calls.append(1) or original(*a, **k)
    stream = generate_tokens(stub, prompt % 10, 5, GREEDY, cache="none")
    assert calls == []
    next(stream)
    assert len(calls) == 1


# --- EOS per row --------------------------------------------------------------------------------


class CountingLM(torch.nn.Module):
    """Predicts (last token + 1) mod vocab with certainty: a scripted model for EOS tests."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.config = types.SimpleNamespace(max_seq_len=64, vocab_size=vocab)

    def forward(self, input_ids, cache=None):
        logits = torch.nn.functional.one_hot((input_ids + 1) % self.vocab, self.vocab).float()
        return types.SimpleNamespace(logits=logits * 20)

    def new_cache(self):
        raise AssertionError("not used with cache='none'")


STOP_AT_5 = SamplingOptions(temperature=0, eos_token_id=5)


def test_eos_stops_each_row_on_its_own():
    stub = CountingLM(vocab=10)
    prompt = torch.tensor([[0, 3], [0, 1], [0, 6]])
    tokens = list(generate_tokens(stub, prompt, 20, STOP_AT_5, cache="none"))
    out = torch.cat([prompt, *tokens], dim=1)
    # rows reach EOS after 2, 4 and 9 steps; a finished row keeps emitting EOS
    assert out.tolist() == [
        [0, 3, 4, 5, 5, 5, 5, 5, 5, 5, 5],
        [0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5],
        [0, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5],
    ]


def test_eos_is_checked_every_interval_and_the_stream_never_waits_otherwise(monkeypatch):
    stub = CountingLM(vocab=10)
    prompt = torch.tensor([[3], [1]])  # every row has finished after 4 steps
    every_3 = SamplingOptions(temperature=0, eos_token_id=5, eos_check_interval=3)
    stream = generate_tokens(stub, prompt, 10, every_3, cache="none")
    host_reads = []
    for name in ("__bool__", "item", "tolist", "__int__", "__float__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name):
            host_reads.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    tokens = list(stream)
    monkeypatch.undo()
    assert len(tokens) == 6  # checked after steps 3 and 6: two EOS steps beyond the 4th
    assert torch.cat(tokens, 1).tolist() == [[4, 5, 5, 5, 5, 5], [2, 3, 4, 5, 5, 5]]
    assert host_reads == ["__bool__", "__bool__"]  # the two checks, nothing per token
    with pytest.raises(ValueError, match="eos_check_interval"):
        SamplingOptions(eos_check_interval=0)


def test_generation_stops_when_every_row_has_finished():
    stub = CountingLM(vocab=10)
    prompt = torch.tensor([[3], [1]])
    tokens = list(generate_tokens(stub, prompt, 10, STOP_AT_5, cache="none"))
    assert len(tokens) == 4  # row 1 needs 4 steps (2, 3, 4, 5); row 0 pads with EOS meanwhile
    assert torch.cat(tokens, 1).tolist() == [[4, 5, 5, 5], [2, 3, 4, 5]]
    assert len(list(generate_tokens(stub, prompt, 10, GREEDY, cache="none"))) == 10


# --- repetition penalty, top-k, top-p -----------------------------------------------------------


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    logits = torch.tensor([[2.0, -2.0, 1.0, -1.0, 0.5]])
    seen = torch.tensor([[0, 1, 1]])
    expected = torch.tensor([[1.0, -4.0, 1.0, -1.0, 0.5]])
    torch.testing.assert_close(apply_repetition_penalty(logits, seen, 2.0), expected)
    # a penalty below 1 encourages repetition the same way round
    torch.testing.assert_close(
        apply_repetition_penalty(logits, seen, 0.5), torch.tensor([[4.0, -1.0, 1.0, -1.0, 0.5]])
    )


def test_repetition_penalty_matches_hf():
    torch.manual_seed(0)
    logits, seen = torch.randn(4, 50), torch.randint(0, 50, (4, 12))
    expected = RepetitionPenaltyLogitsProcessor(1.7)(seen, logits.clone())
    torch.testing.assert_close(apply_repetition_penalty(logits, seen, 1.7), expected)


def test_repetition_penalty_in_generate_avoids_repeats(model, prompt):
    plain = model.generate(prompt, 12, GREEDY)
    penalised = model.generate(prompt, 12, SamplingOptions(temperature=0, repetition_penalty=1e6))
    for row in penalised[:, 5:]:
        assert len(set(row.tolist())) == 12  # every seen token is pushed below every unseen one
    assert not torch.equal(plain, penalised)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_top_k_filter_matches_hf(k):
    torch.manual_seed(0)
    logits = torch.randn(5, 40)
    expected = TopKLogitsWarper(top_k=k)(None, logits.clone())
    assert torch.equal(top_k_filter(logits, k), expected)


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 1.0])
def test_top_p_filter_matches_hf(p):
    torch.manual_seed(0)
    logits = torch.randn(5, 40) * 2
    expected = TopPLogitsWarper(top_p=p)(None, logits.clone())
    assert torch.equal(top_p_filter(logits, p).isinf(), expected.isinf())


def test_top_p_nucleus_by_hand():
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    support = lambda p: (~top_p_filter(logits, p).isinf()).nonzero()[:, 1].tolist()  # noqa: E731
    assert support(0.3) == [0]
    assert support(0.7) == [0, 1]
    assert support(0.9) == [0, 1, 2]
    assert support(1.0) == [0, 1, 2, 3]


def test_sampling_stays_in_the_support():
    torch.manual_seed(0)
    logits = torch.randn(1, 30).repeat(1000, 1)
    generator = torch.Generator().manual_seed(0)
    top3 = logits[0].topk(3).indices.tolist()
    drawn = sample_next(logits, SamplingOptions(top_k=3), generator)
    assert set(drawn.tolist()) == set(top3)
    nucleus = (~top_p_filter(logits[:1], 0.6).isinf()).nonzero()[:, 1].tolist()
    drawn = sample_next(logits, SamplingOptions(top_p=0.6), generator)
    assert set(drawn.tolist()) <= set(nucleus) and len(set(drawn.tolist())) > 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
    ],
)
def test_invalid_sampling_options_are_rejected_when_made(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingOptions(**kwargs)
    with pytest.raises(ValueError, match=message):  # the keyword form: the same check
        MiniMindLM(ModelConfig(**SMALL)).generate(torch.zeros(1, 1, dtype=torch.long), 1, **kwargs)


def test_generate_takes_the_sampling_as_keywords_as_transformers_does(model, prompt):
    def sample(**kwargs):
        return model.generate(prompt, generator=torch.Generator().manual_seed(3), **kwargs)

    keywords = sample(max_new_tokens=8, temperature=0.7, top_k=5)
    assert torch.equal(keywords, sample(max_new_tokens=8, sampling=SamplingOptions(0.7, 5)))
    assert not torch.equal(keywords, sample(max_new_tokens=8))
    with pytest.raises(TypeError, match="not both"):
        model.generate(prompt, 4, GREEDY, top_k=3)
    with pytest.raises(TypeError, match="top_q"):
        model.generate(prompt, 4, top_q=0.5)


@pytest.mark.parametrize("bad", [61, 63, -1])
def test_prompt_ids_outside_the_vocabulary_are_rejected(model, prompt, bad):
    # 61..63 have embedding rows (padding to 64) but are no tokens
    prompt = prompt.clone()
    prompt[1, 2] = bad
    with pytest.raises(ValueError, match=r"input_ids must be in \[0, vocab_size=61\)"):
        model.generate(prompt, 3, stream=True)


# --- padded vocabulary --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def padded_favourite() -> MiniMindLM:
    """vocab 61 padded to 64, whose padded logits (ids 61..63) are made to win every argmax."""
    torch.manual_seed(0)
    model = MiniMindLM(ModelConfig(**SMALL)).eval()

    def favour_padding(module, inputs, logits):  # lm_head [B, T, 64] -> the same, padding at 1e4
        return torch.cat((logits[..., :61], torch.full_like(logits[..., 61:], 1e4)), dim=-1)

    model.lm_head.register_forward_hook(favour_padding)
    return model


def test_padded_logits_really_are_the_largest(padded_favourite, prompt):
    with torch.no_grad():
        logits = padded_favourite(prompt).logits
    assert logits.shape[-1] == 64
    assert bool((logits.argmax(-1) >= 61).all())  # so the test below would catch a leak


@pytest.mark.parametrize("cache", CACHE_KINDS)
@pytest.mark.parametrize(
    "sampling",
    [dict(temperature=0), dict(temperature=1.0), dict(temperature=2.0, top_k=5, top_p=0.9)],
    ids=["greedy", "sample", "top-k-p"],
)
def test_generation_never_emits_a_padded_id(padded_favourite, prompt, cache, sampling):
    generator = torch.Generator().manual_seed(0)
    out = padded_favourite.generate(
        prompt, 30, SamplingOptions(**sampling), cache=cache, generator=generator
    )
    assert out.shape == (3, 35)  # past max_seq_len 24: the sliding window is covered too
    assert int(out.max()) < 61
