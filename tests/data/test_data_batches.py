"""Training batches (determinism, resume, ranks), fixed validation batches, bits per byte."""

import math

import numpy as np
import pytest
import torch

from minimind.data import bits_per_byte
from minimind.data.batches import TrainBatches, fixed_val_batches

# Token i has id i, so every row of a batch names its own start: row == arange(s, s + T).
TOKENS = np.arange(5_000, dtype=np.uint16)


def draw(sampler: TrainBatches, n: int) -> list[torch.Tensor]:
    return [next(sampler) for _ in range(n)]


def test_batches_are_windows_of_the_tokens():
    batch = next(TrainBatches(TOKENS, batch_size=8, seq_len=16, seed=0))
    assert batch.shape == (8, 16) and batch.dtype == torch.long and batch.device.type == "cpu"
    starts = batch[:, :1]
    assert torch.equal(batch, starts + torch.arange(16))
    assert not batch.is_pinned()  # pinned only on request (a CUDA run's trainer asks)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_batches_are_pinned_on_request():
    assert next(TrainBatches(TOKENS, 8, 16, seed=0, pin_memory=True)).is_pinned()
    assert all(b.is_pinned() for b in fixed_val_batches(TOKENS, 4, 50, 2, pin_memory=True))


def test_every_start_is_reachable_and_none_overruns():
    tokens = np.arange(20, dtype=np.uint16)
    sampler = TrainBatches(tokens, batch_size=50, seq_len=5, seed=3)
    starts = torch.cat([batch[:, 0] for batch in draw(sampler, 20)])
    assert set(starts.tolist()) == set(range(16))  # 0 .. n - seq_len


def test_same_seed_same_stream_other_seed_or_rank_another():
    def stream(**kwargs):
        return torch.stack(draw(TrainBatches(TOKENS, 4, 32, **kwargs), 5))

    assert torch.equal(stream(seed=7), stream(seed=7))
    assert not torch.equal(stream(seed=7), stream(seed=8))
    assert not torch.equal(stream(seed=7, rank=0, world=2), stream(seed=7, rank=1, world=2))


def test_bos_aligned_windows_start_at_document_starts():
    doc_starts = np.array([0, 7, 100, 2000, 4990])  # 4990 leaves no room for a window of 32
    sampler = TrainBatches(TOKENS, 64, 32, seed=0, doc_starts=doc_starts)
    starts = torch.cat([batch[:, 0] for batch in draw(sampler, 5)])
    assert set(starts.tolist()) == {0, 7, 100, 2000}


def test_batches_span_shards_of_a_token_stream(tmp_path):
    from minimind.data.tokens import TokenStream

    paths = []
    for k, part in enumerate(np.array_split(TOKENS, 7)):
        paths.append(tmp_path / f"{k}.bin")
        part.tofile(paths[-1])
    stream = TokenStream(paths, np.dtype(np.uint16))
    for a, b in zip(
        draw(TrainBatches(stream, 16, 300, seed=4), 5),
        draw(TrainBatches(TOKENS, 16, 300, seed=4), 5),
        strict=True,
    ):
        assert torch.equal(a, b)
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            fixed_val_batches(stream, 4, 50, 3), fixed_val_batches(TOKENS, 4, 50, 3), strict=True
        )
    )


def test_resume_continues_the_exact_stream():
    sampler = TrainBatches(TOKENS, 4, 32, seed=11)
    draw(sampler, 5)
    state = sampler.state_dict()
    expected = draw(sampler, 3)
    restored = TrainBatches(TOKENS, 4, 32, seed=11)
    restored.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(draw(restored, 3), expected, strict=True))


def test_state_survives_a_weights_only_checkpoint(tmp_path):
    sampler = TrainBatches(TOKENS, 4, 32, seed=2, rank=1, world=2)
    draw(sampler, 4)
    torch.save({"data": sampler.state_dict()}, tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)["data"]
    restored = TrainBatches(TOKENS, 4, 32, seed=2, rank=1, world=2)
    restored.load_state_dict(state)
    assert torch.equal(next(restored), next(sampler))


def test_state_of_another_seed_is_refused():
    with pytest.raises(ValueError, match="seed"):
        TrainBatches(TOKENS, 4, 32, seed=1).load_state_dict({"seed": 2, "batches_drawn": 3})


def test_too_few_training_tokens_is_an_error():
    with pytest.raises(ValueError, match="cannot fill one window"):
        TrainBatches(TOKENS[:10], 4, 32, seed=0)


def test_val_batches_are_fixed_evenly_spaced_and_disjoint():
    batches = fixed_val_batches(TOKENS, batch_size=4, seq_len=50, n_batches=5)
    again = fixed_val_batches(TOKENS, batch_size=4, seq_len=50, n_batches=5)
    assert len(batches) == 5 and all(b.shape == (4, 50) for b in batches)
    assert all(torch.equal(a, b) for a, b in zip(batches, again, strict=True))
    starts = torch.cat([b[:, 0] for b in batches]).tolist()
    # 100 windows of 50 tokens, 20 wanted: every fifth window, across the whole split.
    assert starts == [250 * i for i in range(20)]
    for batch in batches:
        assert torch.equal(batch, batch[:, :1] + torch.arange(50))


def test_short_val_split_gives_fewer_batches():
    batches = fixed_val_batches(TOKENS[:1_000], batch_size=4, seq_len=50, n_batches=10)
    assert len(batches) == 5  # 20 windows fit: 5 whole batches
    starts = torch.cat([b[:, 0] for b in batches]).tolist()
    assert starts == [50 * i for i in range(20)]


def test_tiny_val_split_gives_one_smaller_batch():
    (batch,) = fixed_val_batches(TOKENS[:120], batch_size=4, seq_len=50, n_batches=10)
    assert batch.shape == (2, 50) and batch[:, 0].tolist() == [0, 50]


def test_no_val_window_is_an_error_naming_the_corpus():
    with pytest.raises(ValueError, match="corpus 'tiny.txt'.*fewer than one window of 50"):
        fixed_val_batches(TOKENS[:49], 4, 50, 1, name="corpus 'tiny.txt'")


def test_bpb_hand_counts():
    # A uniform guess over 256 byte values costs ln 256 nats per one-byte token: 8 bits per byte.
    assert bits_per_byte(math.log(256), n_tokens=1000, n_bytes=1000) == pytest.approx(8.0)
    # ln 2 nats per token, two bytes per token: half a bit per byte.
    assert bits_per_byte(math.log(2), n_tokens=50, n_bytes=100) == pytest.approx(0.5)
    # 2.0 nats/token, 100 tokens over 250 bytes: 200 nats = 288.539 bits over 250 bytes.
    assert bits_per_byte(2.0, n_tokens=100, n_bytes=250) == pytest.approx(1.154156, rel=1e-6)


def test_bpb_equals_summed_bits_over_bytes():
    losses = torch.tensor([1.2, 0.4, 3.3, 2.0])  # nats of four tokens spelling 11 bytes
    bits = (losses / math.log(2)).sum().item()
    assert bits_per_byte(losses.mean().item(), 4, 11) == pytest.approx(bits / 11)


def test_bpb_rejects_empty_counts():
    with pytest.raises(ValueError):
        bits_per_byte(1.0, n_tokens=10, n_bytes=0)
