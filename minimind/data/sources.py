"""Opening a corpus through Hugging Face `datasets`, cutting it into pieces, holding out validation.

A corpus becomes `Corpus`: a list of `Piece`s, each a part one worker reads (rows [start, stop) of
a `Dataset`, or one file shard of a streamed `IterableDataset`), routed to the training split, the
validation split, or both by the hold-out rule. The pieces depend on the corpus alone, never on the
number of processes, so shards and their cache are the same whoever prepares them.

Validation: a corpus with its own `val_split` uses it. Otherwise document d is held out when a
seeded 64-bit hash of its identity (its row, or its file shard and position in a stream) falls
below a threshold: `val_fraction` of 2^64, or the `val_docs`-th smallest hash over the rows. The
rule reads one document at a time, so nothing holds the corpus in memory. A single `.txt` file (and
the embedded corpus) is one text: it holds out its last `val_fraction` of bytes, cut at a
character boundary, as nanoGPT does.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from minimind.data.config import DataConfig
from minimind.data.errors import DataError
from minimind.data.files import EMBEDDED_CORPORA, HUB_PREFIX, file_builder, local_corpus_files

# Text (Arrow bytes) per piece of a `Dataset`: the unit of parallel work and of one shard file.
PIECE_BYTES = 32 << 20
# Documents read from the source at a time.
READ_BATCH = 512

Route = Literal["train", "val", "holdout"]
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Piece:
    """One worker's part of the corpus: rows [start, stop) of `source` (a `datasets.Dataset`), or
    with `shard` set, file shard `shard` of `n_shards` of a streamed `IterableDataset`."""

    source: Any
    route: Route
    start: int = 0
    stop: int = 0
    shard: int | None = None
    n_shards: int = 1


@dataclass(frozen=True)
class Corpus:
    """A corpus opened for reading: its pieces, text column and hold-out rule.

    `identity` names the corpus's content (files with sizes and modification times, a hub dataset's
    fingerprint), so that it keys the cache without reading the corpus.
    """

    name: str
    text_field: str
    pieces: list[Piece]
    identity: dict[str, Any]
    seed: int = 0
    threshold: int = 0  # a document is held out when its hash < threshold
    copy: Path | None = None
    """The folder of `datasets`' Arrow copy of a local corpus when this opening made it (None
    when it was there before, or for a hub dataset, whose copy is the user's cache): a failed
    preparation removes it (`discard_copy`)."""

    @property
    def small(self) -> bool:
        """Whether the whole corpus is less than one piece's worth of text (known without a
        stream): not worth starting worker processes for."""
        if any(p.shard is not None for p in self.pieces):
            return False
        return sum(p.source.data.nbytes for p in self.pieces) < PIECE_BYTES


def open_corpus(cfg: DataConfig) -> Corpus:
    """The corpus `cfg` names, opened and checked; raises `DataError`."""
    if cfg.corpus in EMBEDDED_CORPORA or _single_text_file(cfg.corpus):
        return _text_corpus(cfg)
    splits, copy = _load(cfg)
    try:
        return _opened(cfg, splits, copy)
    except DataError:
        discard_copy(copy)
        raise


def _opened(cfg: DataConfig, splits: Any, copy: Path | None) -> Corpus:
    """The corpus of the loaded `splits`, checked; raises `DataError`."""
    if cfg.split not in splits:
        raise DataError(
            f"{cfg.corpus} has no split {cfg.split!r} (it has {sorted(splits)})", "data.split"
        )
    train = _checked(cfg, splits[cfg.split])
    val = _checked(cfg, splits[cfg.val_split]) if cfg.val_split in splits else None
    identity: dict[str, Any] = {
        "corpus": _source_identity(cfg, train),
        "split": cfg.split,
        "val_split": cfg.val_split if val is not None else None,
        "text_field": cfg.text_field,
        "streaming": cfg.streaming,
    }
    if val is not None:
        pieces = _pieces(train, "train") + _pieces(val, "val")
        return Corpus(cfg.corpus, cfg.text_field, pieces, identity, copy=copy)
    threshold = _threshold(cfg, train)
    identity.update(val_seed=cfg.val_seed, hold_out=cfg.val_docs or cfg.val_fraction)
    pieces = _pieces(train, "holdout")
    return Corpus(cfg.corpus, cfg.text_field, pieces, identity, cfg.val_seed, threshold, copy)


def discard_copy(copy: Path | None) -> None:
    """Remove `datasets`' copy of a corpus (`Corpus.copy`), its lock files, and the folders
    above it that it leaves empty, up to the cache's own."""
    if copy is None:
        return
    root = copy.parent.parent  # <cache>/datasets/<builder>/<config id>
    shutil.rmtree(copy, ignore_errors=True)
    for lock in root.glob(f"*{copy.name}*.lock"):
        lock.unlink(missing_ok=True)
    for folder in (copy.parent, root):
        with contextlib.suppress(OSError):  # not empty: another corpus's copy is there
            folder.rmdir()


def documents(corpus: Corpus, piece: Piece) -> Iterator[tuple[list[str], np.ndarray]]:
    """The piece's documents in order, a batch at a time: (texts, held_out [n] bool)."""
    source, name = piece.source, corpus.name
    batches: Iterator[tuple[int, Any]]  # (position, texts)
    if piece.shard is None:
        batches = (
            (start, source[start : min(start + READ_BATCH, piece.stop)][corpus.text_field])
            for start in range(piece.start, piece.stop, READ_BATCH)
        )
        salt = 0
    else:
        stream = source.shard(num_shards=piece.n_shards, index=piece.shard)
        batches = _stream_batches(stream, corpus.text_field, name)
        salt = piece.shard + 1
    for position, texts in batches:
        bad = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
        if bad is not None:
            raise DataError(
                f"{name}: document {position + bad} has no string {corpus.text_field!r} "
                f"(got {type(texts[bad]).__name__})"
            )
        if piece.route == "holdout":
            ids = np.arange(position, position + len(texts), dtype=np.uint64)
            held = document_hash(corpus.seed, salt, ids) < np.uint64(corpus.threshold)
        else:
            held = np.full(len(texts), piece.route == "val")
        yield texts, held


def document_hash(seed: int, salt: int, ids: np.ndarray) -> np.ndarray:
    """splitmix64 of (seed, salt, id) for each id [n] uint64: uniform, seeded document keys."""
    offset = (seed * 0x9E3779B97F4A7C15 + salt * 0xD1B54A32D192ED03) & _MASK64
    with np.errstate(over="ignore"):
        x = ids.astype(np.uint64) + np.uint64(offset)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _stream_batches(stream: Any, text_field: str, name: str) -> Iterator[tuple[int, list]]:
    _quiet_datasets()  # in a tokenization worker, which reads the stream
    position = 0
    try:
        for batch in stream.iter(batch_size=READ_BATCH):
            if text_field not in batch:
                raise DataError(f"{name} has no {text_field!r} column", "data.text_field")
            yield position, batch[text_field]
            position += len(batch[text_field])
    except (UnicodeDecodeError, ValueError, OSError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"cannot read {name}: {_reason(e)}") from e


def _check_val_docs(cfg: DataConfig, documents: int) -> None:
    """`data.val_docs` leaves training documents of the `documents`; raises `DataError`."""
    if cfg.val_docs is not None and cfg.val_docs >= documents:
        raise DataError(
            f"must be < the corpus's {documents} documents, got {cfg.val_docs}", "data.val_docs"
        )


def _check_val_docs_from_metadata(cfg: DataConfig, datasets: Any, args: tuple) -> None:
    """`_check_val_docs` before a hub dataset is downloaded, from the document count its card
    declares (`dataset_info`); without one, `_threshold` checks once it is loaded. A corpus with
    its own validation split holds out none of the training split's documents."""
    try:
        splits = datasets.load_dataset_builder(*args).info.splits or {}
    except Exception:  # no card, offline, not found: load_dataset says what is wrong
        return
    declared = splits.get(cfg.split)
    if declared is not None and declared.num_examples and cfg.val_split not in splits:
        _check_val_docs(cfg, declared.num_examples)


def _threshold(cfg: DataConfig, train: Any) -> int:
    """The hash below which a document is held out (see the module docstring)."""
    if cfg.val_docs is None:
        return int(cfg.val_fraction * (1 << 64))
    n = train.num_rows
    _check_val_docs(cfg, n)
    smallest = np.empty(0, dtype=np.uint64)
    for start in range(0, n, 1 << 20):  # the val_docs smallest hashes, a million rows at a time
        ids = np.arange(start, min(start + (1 << 20), n), dtype=np.uint64)
        both = np.concatenate([smallest, document_hash(cfg.val_seed, 0, ids)])
        smallest = np.partition(both, cfg.val_docs - 1)[: cfg.val_docs]
    return int(smallest.max()) + 1


def _pieces(source: Any, route: Route) -> list[Piece]:
    if not hasattr(source, "num_rows"):  # a stream: one piece per file shard
        n = source.num_shards
        return [Piece(source, route, shard=k, n_shards=n) for k in range(n)]
    rows = source.num_rows
    n = max(1, min(rows, -(-source.data.nbytes // PIECE_BYTES)))
    bounds = [k * rows // n for k in range(n + 1)]
    return [
        Piece(source, route, bounds[k], bounds[k + 1])
        for k in range(n)
        if bounds[k + 1] > bounds[k]
    ]


def _quiet_datasets() -> Any:
    """`datasets`, without progress bars or log lines: it logs a file it cannot read before it
    raises, and the `DataError` made of that says it once, on one line."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    return datasets


def _load(cfg: DataConfig) -> tuple[Any, Path | None]:
    """The corpus's splits (a DatasetDict, or an IterableDatasetDict when streaming), and the
    folder of the copy `datasets` made of a local corpus when this call made it (else None);
    a corpus that cannot be loaded leaves no copy."""
    datasets = _quiet_datasets()
    copy: Path | None = None
    if cfg.corpus.startswith(HUB_PREFIX):
        # A hub dataset goes to the user's Hugging Face cache, shared with their other projects.
        args: tuple = (cfg.corpus[len(HUB_PREFIX) :].strip(), cfg.config)
        kwargs: dict[str, Any] = {}
    else:
        builder, files = local_corpus_files(cfg.corpus)
        if not any(f.stat().st_size for f in files):  # datasets fails on it with StopIteration
            raise DataError(f"{cfg.corpus} is empty")
        if builder == "parquet":
            _check_parquet_magic(files)
        path = Path(cfg.corpus).expanduser()
        # A directory may name its splits in file names (train-*.parquet, validation-*.parquet).
        where = (
            {"data_dir": str(path)} if path.is_dir() else {"data_files": [str(f) for f in files]}
        )
        args = (builder,)
        kwargs = {**where, "cache_dir": str(Path(cfg.cache_dir) / "datasets")}
        if builder == "text":
            kwargs["sample_by"] = "document"  # a .txt file is one document
    offline = cfg.corpus.startswith(HUB_PREFIX) and _go_offline_unless_the_hub_answers(datasets)
    if cfg.corpus.startswith(HUB_PREFIX) and cfg.val_docs is not None:
        _check_val_docs_from_metadata(cfg, datasets, args)
    try:
        if "cache_dir" in kwargs and not cfg.streaming:  # a stream is read where it lies
            made = datasets.load_dataset_builder(*args, **kwargs)
            folder = Path(kwargs["cache_dir"]) / made.name / made.config_id
            copy = None if folder.exists() else folder
        return datasets.load_dataset(*args, streaming=cfg.streaming, **kwargs), copy
    except Exception as e:  # datasets raises many types: not found, offline, a bad file
        discard_copy(copy)
        if offline:
            raise DataError(
                f"cannot load {cfg.corpus}: the Hugging Face Hub does not answer and the dataset "
                f"is not in the local cache ({_reason(e)})"
            ) from e
        raise DataError(f"cannot load {cfg.corpus}: {_reason(e)}") from e


def _check_parquet_magic(files: list[Path]) -> None:
    """Each uncompressed `.parquet` file starts and ends with parquet's magic bytes, checked
    before `datasets` converts any of them; raises `DataError`."""
    for file in files:
        if file.suffix.lower() != ".parquet":
            continue
        with open(file, "rb") as handle:
            head = handle.read(4)
            handle.seek(max(0, file.stat().st_size - 4))
            tail = handle.read(4)
        if head != b"PAR1" or tail != b"PAR1" or file.stat().st_size < 12:
            raise DataError(f"cannot read {file}: not a parquet file (no PAR1 magic bytes)")


HUB_PROBE_S = 5.0  # how long the Hub may take to accept a connection before it counts as away


def _go_offline_unless_the_hub_answers(datasets: Any) -> bool:
    """Whether the Hub is away: then `datasets` and `huggingface_hub` are switched to offline
    mode, so that a cached dataset loads from the cache and another fails at once, rather than
    after a minute of retried requests, a line each. One connection attempt decides."""
    from urllib.parse import urlparse

    import huggingface_hub.constants as hub

    if datasets.config.HF_HUB_OFFLINE:
        return False
    url = urlparse(hub.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=HUB_PROBE_S).close()
        return False
    except OSError:
        datasets.config.HF_HUB_OFFLINE = True
        hub.HF_HUB_OFFLINE = True
        return True


def _checked(cfg: DataConfig, split: Any) -> Any:
    """`split` with only its text column; raises DataError when the column is absent or null."""
    columns = split.column_names
    if columns is not None and cfg.text_field not in columns:
        raise DataError(
            f"{cfg.corpus} has no {cfg.text_field!r} column (it has {columns})", "data.text_field"
        )
    if columns is not None:
        split = split.select_columns([cfg.text_field])
    if hasattr(split, "num_rows"):
        column = split.data.column(cfg.text_field)
        if column.null_count:
            raise DataError(
                f"{cfg.corpus}: {column.null_count} document(s) lack {cfg.text_field!r}"
            )
        if str(column.type) not in ("string", "large_string"):
            raise DataError(f"{cfg.corpus}: {cfg.text_field!r} holds {column.type}, not strings")
    return split


def _source_identity(cfg: DataConfig, train: Any) -> Any:
    if cfg.corpus.startswith(HUB_PREFIX):
        # Non-streaming: datasets' fingerprint of the downloaded revision; a stream: the name.
        return {
            "hub": cfg.corpus,
            "config": cfg.config,
            "fingerprint": getattr(train, "_fingerprint", None),
        }
    _, files = local_corpus_files(cfg.corpus)
    return {"files": [_file_identity(f) for f in files]}


def _file_identity(path: Path) -> list:
    stat = path.stat()
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns]


def _single_text_file(corpus: str) -> bool:
    path = Path(corpus).expanduser()
    return not corpus.startswith(HUB_PREFIX) and path.is_file() and file_builder(path) == "text"


def read_text_corpus(corpus: str) -> bytes:
    """The raw bytes of an embedded corpus or a single (possibly compressed) `.txt` file."""
    if corpus in EMBEDDED_CORPORA:
        packed = resources.files("minimind.data") / "corpora" / EMBEDDED_CORPORA[corpus]
        return gzip.decompress(packed.read_bytes())
    # Bytes, not read_text: universal newlines would turn \r\n into \n and change the byte count.
    raw = Path(corpus).expanduser().read_bytes()
    opener = {".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress}
    try:
        return opener.get(Path(corpus).suffix.lower(), lambda b: b)(raw)
    except (OSError, EOFError, lzma.LZMAError) as e:  # not, or not wholly, what its suffix says
        raise DataError(f"cannot read {corpus}: {_reason(e)}") from e


def split_text(corpus: str, raw: bytes, val_fraction: float) -> tuple[str, str]:
    """(training, validation) text: the last `val_fraction` of bytes, cut at a character start."""
    cut = int(len(raw) * (1.0 - val_fraction))
    while cut < len(raw) and (raw[cut] & 0xC0) == 0x80:  # a UTF-8 continuation byte
        cut += 1
    if cut == 0 or cut == len(raw):
        raise DataError(
            f"{corpus} is too small to hold out val_fraction={val_fraction} "
            f"({cut} training and {len(raw) - cut} validation bytes)"
        )
    try:
        return raw[:cut].decode("utf-8"), raw[cut:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{corpus} is not valid UTF-8: {e}") from e


def _text_corpus(cfg: DataConfig) -> Corpus:
    import datasets

    if cfg.val_docs is not None:
        raise DataError(
            "a one-text corpus holds out by val_fraction, not documents", "data.val_docs"
        )
    raw = read_text_corpus(cfg.corpus)
    train, val = split_text(cfg.corpus, raw, cfg.val_fraction)
    routes: tuple[tuple[str, Route], ...] = ((train, "train"), (val, "val"))
    pieces = [
        Piece(datasets.Dataset.from_dict({"text": [text]}), route, 0, 1) for text, route in routes
    ]
    if cfg.corpus in EMBEDDED_CORPORA:
        identity: Any = {"embedded": cfg.corpus}
    else:
        identity = {"files": [_file_identity(Path(cfg.corpus).expanduser())]}
    identity = {"corpus": identity, "val_fraction": cfg.val_fraction}
    return Corpus(cfg.corpus, "text", pieces, identity)


def _reason(error: BaseException) -> str:
    """The innermost cause's first line: datasets wraps a file's error in its own."""
    while error.__cause__ is not None:
        error = error.__cause__
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
