"""Token shards: writing one piece of a corpus as token files, and reading all shards as one stream.

A split is a sequence of shards `<k>.<split>.bin` (token ids, uint16 or uint32) with
`<k>.<split>.idx` (uint64 offsets of each document's first token in the shard). Every document is
followed by EOS, so the shards concatenate into the split's stream doc0 <eos> doc1 <eos> ...
`<k>.json`, written last, records the piece's counts and marks it done: an interrupted
preparation redoes only the pieces without it. Every file is written atomically.
"""

from __future__ import annotations

import json
import os
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from minimind.data.chunking import text_chunks
from minimind.data.sources import Corpus, Piece, documents
from minimind.data.tokenizer import with_specials
from minimind.foundations.atomic_file import atomic_open, atomic_write_text
from minimind.foundations.processes import stop_when_orphaned

SPLITS = ("train", "val")


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def shard_paths(directory: Path, index: int, split: str) -> tuple[Path, Path]:
    """(token file, document-offset file) of piece `index`'s `split`."""
    return directory / f"{index:05d}.{split}.bin", directory / f"{index:05d}.{split}.idx"


def done_path(directory: Path, index: int) -> Path:
    return directory / f"{index:05d}.json"


@dataclass(frozen=True)
class ShardJob:
    """Everything a worker process needs to tokenize one piece (picklable)."""

    corpus: Corpus
    piece: Piece
    index: int
    tokenizer_json: str
    eos_id: int
    dtype: str
    directory: Path


def tokenize_piece(job: ShardJob) -> dict:
    """Write piece `job.index`'s shards and its done marker; return the marker's counts:
    {split: {"tokens", "bytes", "docs"}}."""
    tokenizer = with_specials(Tokenizer.from_str(job.tokenizer_json))
    dtype, eos = np.dtype(job.dtype), np.array([job.eos_id], dtype=np.int64)
    counts = {split: {"tokens": 0, "bytes": 0, "docs": 0} for split in SPLITS}
    starts = {split: array("Q") for split in SPLITS}  # 8 bytes a document, not a Python int
    paths = {split: shard_paths(job.directory, job.index, split) for split in SPLITS}
    with atomic_open(paths["train"][0]) as train_file, atomic_open(paths["val"][0]) as val_file:
        files = {"train": train_file, "val": val_file}
        for texts, held in documents(job.corpus, job.piece):
            chunks = [list(text_chunks(text)) for text in texts]
            flat = [chunk for doc in chunks for chunk in doc]
            encodings = iter(tokenizer.encode_batch(flat, add_special_tokens=False))
            for text, doc_chunks, is_val in zip(texts, chunks, held, strict=True):
                if not text:  # an empty document adds nothing, not even EOS
                    continue
                split = "val" if is_val else "train"
                ids = [np.asarray(next(encodings).ids, dtype=np.int64) for _ in doc_chunks]
                tokens = np.concatenate([*ids, eos])
                files[split].write(tokens.astype(dtype, copy=False).tobytes())
                starts[split].append(counts[split]["tokens"])
                counts[split]["tokens"] += len(tokens)
                counts[split]["bytes"] += len(text.encode("utf-8"))
                counts[split]["docs"] += 1
    for split in SPLITS:
        with atomic_open(paths[split][1]) as f:
            f.write(starts[split].tobytes())
    atomic_write_text(done_path(job.directory, job.index), json.dumps(counts))
    return counts


def worker_init(threads: int = 1) -> None:
    """In a worker process: `threads` threads for the tokenizer and for Arrow's readers, so that
    the processes together use the cores without oversubscribing them (set before either
    library starts its pool); the worker ends with its parent (a `kill -9` of `data prepare` or
    `run` leaves no orphan)."""
    if threads == 1:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    else:
        os.environ["RAYON_NUM_THREADS"] = str(threads)  # the tokenizers library's thread pool
    import pyarrow

    pyarrow.set_cpu_count(threads)
    stop_when_orphaned()


class TokenStream:
    """The shards of one split read as one read-only array of tokens [n_tokens], memmapped.

    Supports `len`, `dtype`, integer, slice and integer-array indexing (`stream[starts[:, None] +
    np.arange(T)]` gathers windows that may cross shard boundaries), and `doc_starts()`.
    """

    def __init__(self, bins: list[Path], dtype: np.dtype) -> None:
        self.dtype = np.dtype(dtype)
        # np.memmap refuses empty files: a shard without documents of this split is skipped.
        self.paths = [p for p in bins if p.stat().st_size]
        self.shards = [np.memmap(p, dtype=self.dtype, mode="r") for p in self.paths]
        sizes = [len(s) for s in self.shards]
        self.offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
        self._doc_starts: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, index: int | slice | np.ndarray) -> np.ndarray:
        if len(self.shards) == 1:
            return self.shards[0][index]
        if isinstance(index, slice):
            return self._gather(np.arange(*index.indices(len(self)), dtype=np.int64))
        if isinstance(index, (int, np.integer)):
            index = int(index) + (len(self) if index < 0 else 0)
            return self._gather(np.array([index], dtype=np.int64))[0]
        return self._gather(np.asarray(index, dtype=np.int64))

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        whole = np.concatenate([np.asarray(s) for s in self.shards]) if self.shards else np.empty(0)
        return whole.astype(dtype or self.dtype, copy=False)

    def doc_starts(self) -> np.ndarray:
        """Positions [n_docs] int64 in the stream where each document starts, ascending."""
        if self._doc_starts is None:
            parts = [
                np.fromfile(path.with_suffix(".idx"), dtype=np.uint64).astype(np.int64) + offset
                for path, offset in zip(self.paths, self.offsets, strict=False)
            ]
            self._doc_starts = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        return self._doc_starts

    def _gather(self, index: np.ndarray) -> np.ndarray:
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"token index out of range [0, {len(self)})")
        shard = np.searchsorted(self.offsets, index, side="right") - 1
        out = np.empty(index.shape, dtype=self.dtype)
        for k in np.unique(shard):
            where = shard == k
            out[where] = self.shards[k][index[where] - self.offsets[k]]
        return out
