"""Token shards: writing one piece of a corpus as token files, and reading all shards as one stream.

A split is a sequence of shards `<k>.<split>.bin` (token ids, uint16 or uint32) with
`<k>.<split>.idx` (uint64 offsets of each document's first token in the shard). Every document is
followed by EOS, so the shards concatenate into the split's stream doc0 <eos> doc1 <eos> ...
`<k>.json`, written last, records the piece's counts and marks it done: an interrupted
preparation redoes only the pieces without it. Every file is written atomically.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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
# Characters encoded by one `encode_batch` call: enough chunks to keep every core busy.
ENCODE_CHARS = 1 << 21


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
    dtype = np.dtype(job.dtype)
    counts = {split: {"tokens": 0, "bytes": 0, "docs": 0} for split in SPLITS}
    with contextlib.ExitStack() as stack:
        files = {
            split: [
                stack.enter_context(atomic_open(path))
                for path in shard_paths(job.directory, job.index, split)
            ]
            for split in SPLITS
        }
        batches = documents(job.corpus, job.piece)
        for texts, held, (tokens, lengths) in _encoded(tokenizer, batches, job.eos_id):
            for split, in_split in (("train", ~held), ("val", held)):
                docs = in_split & (lengths > 0)  # an empty document adds nothing, not even EOS
                if not docs.any():
                    continue
                doc_lengths = lengths[docs]
                starts = counts[split]["tokens"] + np.cumsum(doc_lengths) - doc_lengths
                bins, idx = files[split]
                bins.write(tokens[np.repeat(in_split, lengths)].astype(dtype).tobytes())
                idx.write(starts.astype(np.uint64).tobytes())
                counts[split]["tokens"] += int(doc_lengths.sum())
                counts[split]["bytes"] += len("".join(itertools.compress(texts, docs)).encode())
                counts[split]["docs"] += int(docs.sum())
    atomic_write_text(done_path(job.directory, job.index), json.dumps(counts))
    return counts


def _encoded(
    tokenizer: Tokenizer, batches: Iterator[tuple[list[str], np.ndarray]], eos_id: int
) -> Iterator[tuple[list[str], np.ndarray, tuple[np.ndarray, np.ndarray]]]:
    """Each batch (texts, held_out) with its `encode_documents`, the next batch encoding in a
    thread while this one is written and the one after is read: the tokenizer runs in Rust
    without the GIL, so reading and writing overlap it instead of waiting between batches."""
    with ThreadPoolExecutor(1, thread_name_prefix="minimind-encode") as encoder:
        ahead: tuple[list[str], np.ndarray, Future] | None = None
        for texts, held in batches:
            future = encoder.submit(encode_documents, tokenizer, texts, eos_id)
            if ahead is not None:
                yield ahead[0], ahead[1], ahead[2].result()
            ahead = (texts, held, future)
        if ahead is not None:
            yield ahead[0], ahead[1], ahead[2].result()


def encode_documents(
    tokenizer: Tokenizer, texts: list[str], eos_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens [n_tokens] int64: every non-empty document's ids followed by `eos_id`, in order;
    lengths [len(texts)] int64: each document's share of them, 0 for an empty one). Documents
    are cut into bounded `text_chunks`, encoded `encode_batch` call by call over at most
    `ENCODE_CHARS` characters (the tokenizer's encodings hold several hundred bytes a character:
    only their ids are kept); the ids are gathered with numpy, not document by document."""
    chunks, owners = [], []
    for k, text in enumerate(texts):
        for chunk in text_chunks(text):
            chunks.append(chunk)
            owners.append(k)
    ids = [
        np.array(encoding.ids, dtype=np.int64)
        for group in _groups(chunks)
        for encoding in tokenizer.encode_batch(group, add_special_tokens=False)
    ]
    chunk_lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    has_text = np.bincount(owners, minlength=len(texts)) > 0
    # Exact: bincount sums its weights in float64, and a batch holds far fewer than 2^53 ids.
    lengths = np.bincount(owners, weights=chunk_lengths, minlength=len(texts)).astype(np.int64)
    lengths += has_text  # the EOS
    is_eos = np.zeros(int(lengths.sum()), dtype=bool)
    is_eos[np.cumsum(lengths)[has_text] - 1] = True
    tokens = np.empty(is_eos.size, dtype=np.int64)
    tokens[is_eos] = eos_id
    tokens[~is_eos] = np.concatenate(ids) if ids else np.empty(0, dtype=np.int64)
    return tokens, lengths


def _groups(chunks: list[str]) -> Iterator[list[str]]:
    """`chunks` in consecutive groups of at most `ENCODE_CHARS` characters (one chunk at least)."""
    group: list[str] = []
    size = 0
    for chunk in chunks:
        if group and size + len(chunk) > ENCODE_CHARS:
            yield group
            group, size = [], 0
        group.append(chunk)
        size += len(chunk)
    if group:
        yield group


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
