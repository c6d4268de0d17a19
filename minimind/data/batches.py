"""Batches of token windows: a seeded random stream for training, a fixed set for validation.

A batch is a CPU LongTensor [B, seq_len] of consecutive token ids (the model shifts labels
itself). With `pin_memory` (the trainer sets it for a CUDA run: `minimind.training.device.pins_memory`)
it is in pinned memory, so that the copy to the device can be `non_blocking=True`; every batch is
a fresh tensor, so an in-flight copy is never overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from minimind.data.prepare import PreparedData
from minimind.data.tokens import TokenStream

Tokens = np.ndarray | TokenStream
"""A split's tokens [n_tokens]: in memory, or memmapped shards read as one array."""


class TrainBatches:
    """Random windows of `seq_len` tokens from `tokens` [n_tokens] (an array or a `TokenStream`
    over every shard): this rank's rows of each global batch of `batch_size` windows.

    Global batch i is drawn from a generator seeded with (seed, i), so the stream is fully
    determined by the seed, and resuming needs only the batch index. Every rank of `world` draws
    the same window starts and reads only its own rows, [rank·B/W, (rank+1)·B/W): the ranks'
    slices are disjoint and together are the single-process batch, and `state_dict()` saved by
    any rank restores every rank. With `doc_starts` (ascending positions of document starts,
    `TokenStream.doc_starts()`), every window starts at a document start (`data.bos_align`).
    """

    def __init__(
        self,
        tokens: Tokens,
        batch_size: int,
        seq_len: int,
        seed: int,
        rank: int = 0,
        world: int = 1,
        doc_starts: np.ndarray | None = None,
        pin_memory: bool = False,
    ) -> None:
        if batch_size < 1 or seq_len < 1:
            raise ValueError(f"batch_size and seq_len must be >= 1, got {batch_size}, {seq_len}")
        if seed < 0 or not 0 <= rank < world:
            raise ValueError(f"need seed >= 0 and 0 <= rank < world, got {seed}, {rank}, {world}")
        if batch_size % world:
            raise ValueError(f"batch of {batch_size} does not split evenly over {world} ranks")
        if len(tokens) < seq_len:
            raise ValueError(f"{len(tokens)} training tokens cannot fill one window of {seq_len}")
        self.tokens = tokens
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.seed = seed
        self.rows = slice(rank * batch_size // world, (rank + 1) * batch_size // world)
        self.pin_memory = pin_memory
        self.batches_drawn = 0
        self.starts: np.ndarray | None = None
        if doc_starts is not None:
            # Documents whose start leaves room for a whole window.
            self.starts = doc_starts[: np.searchsorted(doc_starts, len(tokens) - seq_len, "right")]
            if len(self.starts) == 0:
                raise ValueError(f"no document starts a window of {seq_len} tokens")

    def __iter__(self) -> TrainBatches:
        return self

    def __next__(self) -> torch.Tensor:
        """This rank's rows of the next global batch, LongTensor [batch_size / world, seq_len]."""
        # (seed, 0, i): the seeding of earlier versions, whose recorded runs it reproduces.
        rng = np.random.default_rng([self.seed, 0, self.batches_drawn])
        if self.starts is None:
            starts = rng.integers(0, len(self.tokens) - self.seq_len + 1, size=self.batch_size)
        else:
            starts = self.starts[rng.integers(0, len(self.starts), size=self.batch_size)]
        self.batches_drawn += 1
        return _windows(self.tokens, starts[self.rows], self.seq_len, self.pin_memory)

    def state_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "batches_drawn": self.batches_drawn}

    def source_metrics(self) -> dict[str, float]:
        """Per-source counts of a mixture (`MixtureBatches`); a single corpus has none."""
        return {}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["seed"] != self.seed:
            raise ValueError(f"batch state of seed {state['seed']} loaded into seed {self.seed}")
        self.batches_drawn = int(state["batches_drawn"])


class MixtureBatches(TrainBatches):
    """`TrainBatches` over a weighted mixture: each window of global batch i comes from source k
    with probability `weights[k]`, at a uniform start in that source's training tokens (or a
    uniform document start there, with `doc_starts`).

    Batch i is a pure function of (seed, i): one generator seeded with (seed, 0, i) draws the
    windows' sources (one uniform per window against the cumulative weights), then each
    source's starts, sources in order. So arms with the same seed read the same windows, and a
    resumed run needs only the batch index. `windows_drawn` counts each source's windows of
    the global batches so far (`source_metrics`: tokens seen and epochs per source).
    """

    def __init__(
        self,
        sources: Sequence[tuple[str, Tokens]],
        weights: Sequence[float],
        batch_size: int,
        seq_len: int,
        seed: int,
        rank: int = 0,
        world: int = 1,
        doc_starts: Sequence[np.ndarray] | None = None,
        pin_memory: bool = False,
    ) -> None:
        if len(sources) != len(weights) or not sources:
            raise ValueError(f"need one weight per source, got {len(weights)} for {len(sources)}")
        self.names = [name for name, _ in sources]
        self.parts = [
            TrainBatches(
                tokens,
                batch_size,
                seq_len,
                seed,
                rank,
                world,
                None if doc_starts is None else doc_starts[k],
            )
            for k, (_, tokens) in enumerate(sources)
        ]
        super().__init__(
            self.parts[0].tokens, batch_size, seq_len, seed, rank, world, None, pin_memory
        )
        self.cumulative = np.cumsum(np.asarray(weights, dtype=np.float64))
        self.cumulative /= self.cumulative[-1]
        self.windows_drawn = np.zeros(len(sources), dtype=np.int64)

    def draw(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Global batch `index`: (source [batch_size] int64, start [batch_size] int64) of each
        window, from (seed, index) alone."""
        rng = np.random.default_rng([self.seed, 0, index])
        source = np.searchsorted(self.cumulative, rng.random(self.batch_size), side="right")
        source = np.minimum(source, len(self.parts) - 1)  # a uniform of exactly 1.0 - 2^-53
        starts = np.zeros(self.batch_size, dtype=np.int64)
        for k, part in enumerate(self.parts):
            rows = np.flatnonzero(source == k)
            if part.starts is None:
                starts[rows] = rng.integers(0, len(part.tokens) - self.seq_len + 1, len(rows))
            else:
                starts[rows] = part.starts[rng.integers(0, len(part.starts), len(rows))]
        return source, starts

    def __next__(self) -> torch.Tensor:
        """This rank's rows of the next global batch, LongTensor [batch_size / world, seq_len]."""
        source, starts = self.draw(self.batches_drawn)
        self.batches_drawn += 1
        self.windows_drawn += np.bincount(source, minlength=len(self.parts))
        source, starts = source[self.rows], starts[self.rows]
        rows = np.empty((len(starts), self.seq_len), dtype=np.int64)
        for k, part in enumerate(self.parts):
            mine = source == k
            if mine.any():
                rows[mine] = part.tokens[starts[mine][:, None] + np.arange(self.seq_len)]
        batch = torch.from_numpy(rows)
        return batch.pin_memory() if self.pin_memory else batch

    def load_state_dict(self, state: dict[str, int]) -> None:
        super().load_state_dict(state)
        # The counts are a function of the batches drawn: redrawn, not stored.
        self.windows_drawn = np.zeros(len(self.parts), dtype=np.int64)
        for index in range(self.batches_drawn):
            self.windows_drawn += np.bincount(self.draw(index)[0], minlength=len(self.parts))

    def source_metrics(self) -> dict[str, float]:
        """`data/<source>/tokens` (training tokens drawn from it, all ranks) and
        `data/<source>/epochs` (those over its training tokens)."""
        metrics: dict[str, float] = {}
        for name, part, windows in zip(self.names, self.parts, self.windows_drawn, strict=True):
            tokens = int(windows) * self.seq_len
            metrics[f"data/{name}/tokens"] = tokens
            metrics[f"data/{name}/epochs"] = tokens / len(part.tokens)
        return metrics


def train_batches(
    data: PreparedData,
    batch_size: int,
    seq_len: int,
    seed: int,
    rank: int = 0,
    world: int = 1,
    pin_memory: bool = False,
) -> TrainBatches:
    """The training batches of `data`: `TrainBatches` over its one corpus, or `MixtureBatches`
    over the sources of a mixture; windows start at document starts with `data.bos_align`."""
    if len(data.sources) > 1:
        return MixtureBatches(
            [(source.name, source.train_tokens) for source in data.sources],
            [source.weight for source in data.sources],
            batch_size,
            seq_len,
            seed,
            rank,
            world,
            [s.train_tokens.doc_starts() for s in data.sources] if data.bos_align else None,
            pin_memory,
        )
    return TrainBatches(
        data.train_tokens,
        batch_size,
        seq_len,
        seed,
        rank,
        world,
        data.train_tokens.doc_starts() if data.bos_align else None,
        pin_memory,
    )


def fixed_val_batches(
    tokens: Tokens,
    batch_size: int,
    seq_len: int,
    n_batches: int,
    name: str = "the validation split",
    pin_memory: bool = False,
) -> list[torch.Tensor]:
    """Up to `n_batches` batches [batch_size, seq_len] of non-overlapping windows, evenly spaced
    over the whole of `tokens`, identical for every variant and seed.

    A split too short for `n_batches · batch_size` windows gives fewer batches; one shorter than
    `batch_size` windows gives a single smaller batch. `name` (the corpus) goes in the error
    raised when not even one window fits.
    """
    if batch_size < 1 or seq_len < 1 or n_batches < 1:
        raise ValueError(
            f"batch_size, seq_len, n_batches must be >= 1: {batch_size, seq_len, n_batches}"
        )
    available = len(tokens) // seq_len
    if available == 0:
        raise ValueError(f"{name} has {len(tokens)} tokens, fewer than one window of {seq_len}")
    # Whole batches if at least one fits, else a single batch of every window there is.
    count = min(n_batches * batch_size, available // batch_size * batch_size) or available
    windows = np.arange(count) * available // count  # distinct, since count <= available
    starts = windows * seq_len
    return [
        _windows(tokens, starts[i : i + batch_size], seq_len, pin_memory)
        for i in range(0, len(starts), batch_size)
    ]


def document_ids(batch: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Each token's document index within its row, [B, T] -> [B, T] int64: documents end with
    EOS, which belongs to the document it ends (it is that document's last prediction)."""
    is_eos = (batch == eos_id).long()
    return torch.cumsum(is_eos, dim=1) - is_eos


def exact_val_windows(
    tokens: Tokens, seq_len: int, batch_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every token of `tokens` but the first as a target exactly once: (inputs, targets) batches
    of non-overlapping windows, inputs tokens[s : s + seq_len] and targets one to the right,
    plus the tail (the last (N - 1) mod seq_len targets) as a batch of its own.

    Each target is scored with the context its window gives it: the first target of a window
    sees one token, the last seq_len. Shapes: [b, seq_len] each, the tail [1, r].
    """
    if len(tokens) < 2:
        raise ValueError(f"the validation split has {len(tokens)} tokens, too few to score")
    full = (len(tokens) - 1) // seq_len
    starts = np.arange(full) * seq_len
    batches = []
    for i in range(0, full, batch_size):
        chunk = starts[i : i + batch_size]
        batches.append(
            (_windows(tokens, chunk, seq_len, False), _windows(tokens, chunk + 1, seq_len, False))
        )
    tail = (len(tokens) - 1) % seq_len
    if tail:
        start = np.array([full * seq_len])
        batches.append(
            (_windows(tokens, start, tail, False), _windows(tokens, start + 1, tail, False))
        )
    return batches


def _windows(tokens: Tokens, starts: np.ndarray, seq_len: int, pin: bool) -> torch.Tensor:
    """tokens[s : s + seq_len] for each start s, as a LongTensor [len(starts), seq_len]."""
    rows = tokens[starts[:, None] + np.arange(seq_len)].astype(np.int64)
    batch = torch.from_numpy(rows)
    return batch.pin_memory() if pin else batch
