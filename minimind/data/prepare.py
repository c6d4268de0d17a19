"""`prepare_data`: corpus -> tokenizer -> token shards and their manifest, each step cached.

Cache layout under `DataConfig.cache_dir`:
  tokenizers/<key>/tokenizer.json   key: the corpus's identity and hold-out, tokenizer settings
  tokens/<key>/<k>.{train,val}.{bin,idx}, <k>.json, manifest.json
                                    key: the corpus's identity and hold-out, the tokenizer's hash
  datasets/                         `datasets`' Arrow copy of a local corpus
Pieces are tokenized by `num_proc` processes (default: one per core from 3 cores, else one process
with the tokenizer's own threads; see `tokenizing_processes`), each piece's shards written
atomically and marked done by `<k>.json`; `manifest.json`, written last, marks a complete entry,
and its hash (`PreparedData.manifest_hash`) is logged with every run trained on it. A corpus
refused once it is converted or tokenized (a document without text, a split without documents,
fewer tokens than the runs' `train.seq_len`) leaves nothing this preparation wrote: its copy,
tokenizer and token entry are removed; entries made before by other preparations stay. An
interrupted or crashed preparation keeps its finished pieces, for the next one to resume.
"""

from __future__ import annotations

import contextlib
import errno
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from minimind.data.cache import cache_key, sha256_hex
from minimind.data.chunking import text_chunks
from minimind.data.config import DataConfig
from minimind.data.errors import DataError
from minimind.data.sources import Corpus, discard_copy, documents, open_corpus
from minimind.data.splits import HeldOut, Source
from minimind.data.tokenizer import load_tokenizer, special_ids, train_bpe
from minimind.data.tokens import (
    SPLITS,
    ShardJob,
    TokenStream,
    done_path,
    shard_paths,
    token_dtype,
    tokenize_piece,
    worker_init,
)
from minimind.foundations.atomic_file import atomic_write_text
from minimind.foundations.file_lock import creation_lock
from minimind.foundations.progress import display

# Bump when the cached files' meaning changes, so old entries are not reused.
CACHE_VERSION = 2
# Up to this many cores, one process with the tokenizer's own threads beats a process per core:
# on 2 cores the processes tokenized at 0.83x a plain encode_batch loop, oversubscribed.
THREADS_ONLY_CORES = 2


@dataclass(frozen=True)
class PreparedData:
    """A tokenized corpus: each split a `TokenStream` [n_tokens] of uint16/uint32 over its shards.

    `vocab_size` is the tokenizer's (it may fall short of the configured size on a tiny corpus);
    the model's vocabulary must be at least this large. `val_bytes` is the exact UTF-8 byte count
    of the held-out text, for bits per byte. `manifest_hash` names the prepared shards.
    `bos_align` and `doc_mask` are the data section's packing of windows (`DataConfig`).
    A mixture (`data.sources`) has its `sources` (the splits above are their union) and a suite
    its `eval_sets` (`minimind.data.mixture`).
    """

    corpus: str
    tokenizer: Tokenizer
    tokenizer_path: Path
    vocab_size: int
    pad_id: int
    bos_id: int
    eos_id: int
    train_tokens: TokenStream
    val_tokens: TokenStream
    train_bytes: int
    val_bytes: int
    manifest_hash: str
    bos_align: bool = False
    doc_mask: bool = False
    sources: tuple[Source, ...] = ()
    eval_sets: Mapping[str, HeldOut] = field(default_factory=dict)


def prepare_data(cfg: DataConfig, min_tokens: int = 0) -> PreparedData:
    """Tokenize `cfg.corpus` into shards, training or loading the tokenizer; reuse the cache when
    it matches, and finish an interrupted preparation. Raises `DataError`, having removed what
    it wrote; a split of fewer than `min_tokens` tokens (the longest `train.seq_len` of the runs
    that read it) is a `train.seq_len` one.

    Processes preparing the same corpus at once (runs started together, sweep workers) take
    turns under one lock per corpus, so that the tokenizer is trained and the tokens are written
    once and the others reuse them.
    """
    corpus = open_corpus(cfg)
    lock = Path(cfg.cache_dir) / "locks" / cache_key({"corpus": corpus.identity})[:16]
    try:
        with creation_lock(lock):
            written: list[Path] = []  # the folders this preparation made, in the cache
            try:
                return _prepare(cfg, corpus, written, min_tokens)
            except DataError:
                for folder in written:
                    shutil.rmtree(folder, ignore_errors=True)
                    with contextlib.suppress(OSError):  # not empty: other entries are there
                        folder.parent.rmdir()
                discard_copy(corpus.copy)
                raise
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # every file is written atomically: what was cut short left nothing, the pieces done stay
        raise DataError(
            f"no space left on the device to prepare {cfg.corpus} under {cfg.cache_dir} "
            f"({exc.filename or exc.strerror}); the pieces tokenized so far are kept: free space "
            "and run again",
            "data.cache_dir",
        ) from exc


def _prepare(cfg: DataConfig, corpus: Corpus, written: list[Path], min_tokens: int) -> PreparedData:
    if cfg.tokenizer.path is not None:
        tokenizer_path = Path(cfg.tokenizer.path).expanduser()
        tokenizer = load_tokenizer(tokenizer_path)
    else:
        key = cache_key(
            {
                "version": CACHE_VERSION,
                "corpus": corpus.identity,  # with the hold-out: the tokenizer sees training text only
                "type": cfg.tokenizer.type,
                "vocab_size": cfg.tokenizer.vocab_size,
                "sample_bytes": cfg.tokenizer.sample_bytes,
            }
        )
        tokenizer_path = Path(cfg.cache_dir) / "tokenizers" / key / "tokenizer.json"
        if tokenizer_path.is_file():
            tokenizer = load_tokenizer(tokenizer_path)
        else:
            written.append(tokenizer_path.parent)
            tokenizer = _train_and_save(cfg, corpus, tokenizer_path)

    ids = special_ids(tokenizer)
    tokens_key = cache_key(
        {
            "version": CACHE_VERSION,
            "corpus": corpus.identity,
            "tokenizer_sha256": sha256_hex(tokenizer.to_str()),
        }
    )
    directory = Path(cfg.cache_dir) / "tokens" / tokens_key
    manifest_path = directory / "manifest.json"
    if not manifest_path.is_file():
        if not directory.exists():  # else the pieces of an interrupted preparation, resumed
            written.append(directory)
        _tokenize(cfg, corpus, tokenizer, ids.eos, directory)
    text = manifest_path.read_text()
    manifest = json.loads(text)
    _check_documents(cfg, manifest)
    shortest = min(manifest["splits"][split]["tokens"] for split in SPLITS)
    if shortest < min_tokens:
        raise DataError(
            f"must be <= the {shortest} tokens of the corpus's smaller split, got {min_tokens}",
            "train.seq_len",
        )
    streams = {
        split: TokenStream(
            [directory / shard["file"] for shard in manifest["splits"][split]["shards"]],
            manifest["dtype"],
        )
        for split in SPLITS
    }
    return PreparedData(
        corpus=cfg.corpus,
        tokenizer=tokenizer,
        tokenizer_path=tokenizer_path,
        vocab_size=tokenizer.get_vocab_size(),
        pad_id=ids.pad,
        bos_id=ids.bos,
        eos_id=ids.eos,
        train_tokens=streams["train"],
        val_tokens=streams["val"],
        train_bytes=manifest["splits"]["train"]["bytes"],
        val_bytes=manifest["splits"]["val"]["bytes"],
        manifest_hash=manifest_hash(text),
        bos_align=cfg.bos_align,
        doc_mask=cfg.doc_mask,
    )


def manifest_hash(text: str) -> str:
    """The hash that names prepared shards (`PreparedData.manifest_hash`, a run's
    `data_manifest` tag): of their manifest.json's text."""
    return sha256_hex(text)[:16]


def split_tokens(cache_dir: str | Path, hashed: str, split: str = "train") -> int | None:
    """The tokens of `split` in the prepared data under `cache_dir` whose manifest hashes to
    `hashed` (a run's `data_manifest` tag); None when the cache holds no such entry (removed,
    or prepared on another machine)."""
    for path in sorted(Path(cache_dir).glob("tokens/*/manifest.json")):
        text = path.read_text()
        if manifest_hash(text) == hashed:
            return int(json.loads(text)["splits"][split]["tokens"])
    return None


def training_sample(corpus: Corpus, budget: int) -> Iterator[str]:
    """Chunks of the training split's documents in corpus order, about `budget` UTF-8 bytes."""
    taken = 0
    for piece in corpus.pieces:
        if piece.route == "val":
            continue
        for texts, held in documents(corpus, piece):
            for text, is_val in zip(texts, held, strict=True):
                if is_val:
                    continue
                for chunk in text_chunks(text):
                    yield chunk
                    taken += len(chunk.encode("utf-8"))
                    if taken >= budget:
                        return


def _train_and_save(cfg: DataConfig, corpus: Corpus, path: Path) -> Tokenizer:
    start = time.perf_counter()
    tokenizer = train_bpe(
        training_sample(corpus, cfg.tokenizer.sample_bytes), cfg.tokenizer.vocab_size
    )
    _say(
        f"trained a {tokenizer.get_vocab_size()}-token BPE on up to {cfg.tokenizer.sample_bytes:,} "
        f"bytes of {cfg.corpus}'s training split in {time.perf_counter() - start:.1f} s"
    )
    atomic_write_text(path, tokenizer.to_str())
    return tokenizer


def _tokenize(
    cfg: DataConfig, corpus: Corpus, tokenizer: Tokenizer, eos_id: int, directory: Path
) -> None:
    """Tokenize every piece not done yet, in parallel, then write the manifest."""
    dtype = token_dtype(tokenizer.get_vocab_size())
    jobs = [
        ShardJob(corpus, piece, k, tokenizer.to_str(), eos_id, dtype.name, directory)
        for k, piece in enumerate(corpus.pieces)
    ]
    counts = {
        job.index: json.loads(done_path(directory, job.index).read_text())
        for job in jobs
        if done_path(directory, job.index).is_file()
    }
    pending = [job for job in jobs if job.index not in counts]
    if counts:
        _say(f"resuming {cfg.corpus}: {len(counts)} of {len(jobs)} pieces already tokenized")
    cores = usable_cores()
    processes = tokenizing_processes(cfg.num_proc, len(pending), cores)
    # A daemonic process (a sweep worker) may not start processes of its own.
    if corpus.small or multiprocessing.current_process().daemon:
        processes = 1
    with _progress(cfg.corpus, len(jobs), len(counts)) as advance:
        for index, piece_counts in _run(pending, processes, max(1, cores // processes)):
            counts[index] = piece_counts
            advance(piece_counts)
    manifest = {
        "version": CACHE_VERSION,
        "corpus": cfg.corpus,
        "identity": corpus.identity,
        "dtype": dtype.name,
        "vocab_size": tokenizer.get_vocab_size(),
        "tokenizer_sha256": sha256_hex(tokenizer.to_str()),
        "splits": {
            split: {
                **{
                    field: sum(counts[job.index][split][field] for job in jobs)
                    for field in ("tokens", "bytes", "docs")
                },
                "shards": [
                    {
                        "file": shard_paths(directory, job.index, split)[0].name,
                        **counts[job.index][split],
                    }
                    for job in jobs
                ],
            }
            for split in SPLITS
        },
    }
    atomic_write_text(directory / "manifest.json", json.dumps(manifest, indent=1))


def _check_documents(cfg: DataConfig, manifest: dict) -> None:
    """Both splits hold documents; raises `DataError`."""
    if manifest["splits"]["train"]["docs"] == 0:
        raise DataError(f"{cfg.corpus} leaves no training documents")
    if manifest["splits"]["val"]["docs"] == 0:
        field = "data.val_docs" if cfg.val_docs else "data.val_fraction"
        raise DataError(f"holds out no document of {cfg.corpus}: raise it", field)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. under `taskset` or a container's
    cpuset), which `os.cpu_count()` ignores."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def tokenizing_processes(num_proc: int | None, pieces: int, cores: int) -> int:
    """How many processes tokenize `pieces` pieces on `cores` cores: `num_proc` when set, else one
    per core, except on up to `THREADS_ONLY_CORES` cores, where one process whose tokenizer runs
    a thread per core is faster (no second corpus reader, no start-up, no contention between
    processes; `minimind bench --suite data` measures both side by side)."""
    if num_proc is None:
        num_proc = 1 if cores <= THREADS_ONLY_CORES else cores
    return max(1, min(num_proc, pieces))


def _run(jobs: list[ShardJob], processes: int, threads: int) -> Iterator[tuple[int, dict]]:
    """(piece index, counts) of each job as it finishes: in this process (the tokenizer's own
    threads on every core), or in a pool of processes with `threads` tokenizer threads each, so
    that processes × threads never oversubscribes the cores."""
    if processes <= 1:
        for job in jobs:
            yield job.index, tokenize_piece(job)
        return
    # spawn: a fork would copy the parent's threads (tokenizers', torch's) in an unknown state.
    # A worker that dies (killed, out of memory) breaks the pool with an error, never a hang.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        processes, mp_context=context, initializer=worker_init, initargs=(threads,)
    ) as pool:
        futures = {pool.submit(tokenize_piece, job): job.index for job in jobs}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        except BrokenProcessPool as e:
            raise RuntimeError(
                "a tokenization worker died (killed, out of memory, or started from a script "
                "without `if __name__ == '__main__':`); the pieces done are kept, and "
                "data.num_proc: 1 tokenizes in this process"
            ) from e


def _say(message: str) -> None:
    """A progress line on stderr (the CLI configures no logging)."""
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _progress(corpus: str, total: int, done: int) -> Iterator[Callable[[dict], None]]:
    """`advance(counts)` per finished piece: a bar (documents, tokens, MB/s) on a terminal, a
    line per piece on stderr otherwise (`progress.display`)."""
    start, totals = time.perf_counter(), {"docs": 0, "tokens": 0, "bytes": 0}
    pieces = [done]

    with display(f"tokenizing {corpus}", total, done, transient=True) as shown:

        def advance(counts: dict) -> None:
            for field in totals:
                totals[field] += sum(counts[split][field] for split in SPLITS)
            rate = totals["bytes"] / 1e6 / max(time.perf_counter() - start, 1e-9)
            status = f"{totals['docs']:,} docs  {totals['tokens']:,} tokens  {rate:.1f} MB/s"
            pieces[0] += 1
            line = f"tokenized {corpus}: piece {pieces[0]}/{total}, {status}"
            shown.report(pieces[0], status=status, line=line)

        yield advance
