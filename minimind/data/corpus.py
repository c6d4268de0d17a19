"""Reading a corpus and holding out its validation split.

A text corpus (the embedded one or a `.txt` file) holds out its last `val_fraction` of bytes, cut
at a character boundary, as nanoGPT does. A document corpus (`.jsonl` of {"text": ...} lines, or
`.parquet` with a `text` column) holds out its last documents, about `val_fraction` of the bytes.
"""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from minimind.data.config import EMBEDDED_CORPORA
from minimind.data.errors import DataError


@dataclass(frozen=True)
class CorpusSplit:
    """Training and validation documents, and their exact UTF-8 byte counts."""

    train: list[str]
    val: list[str]
    train_bytes: int
    val_bytes: int


def read_corpus(corpus: str) -> bytes:
    """The corpus's raw bytes (decompressed for an embedded corpus); its hash keys every cache."""
    if corpus in EMBEDDED_CORPORA:
        packed = resources.files("minimind.data").joinpath("corpora", EMBEDDED_CORPORA[corpus])
        return gzip.decompress(packed.read_bytes())
    # Bytes, not read_text: universal newlines would turn \r\n into \n and change the byte count.
    return Path(corpus).expanduser().read_bytes()


def split_corpus(corpus: str, raw: bytes, val_fraction: float) -> CorpusSplit:
    """Split the bytes `read_corpus(corpus)` returned into training and validation documents."""
    suffix = Path(corpus).suffix.lower()
    if suffix == ".jsonl":
        return _split_documents(corpus, _jsonl_documents(corpus, raw), val_fraction)
    if suffix == ".parquet":
        return _split_documents(corpus, _parquet_documents(corpus, raw), val_fraction)
    return _split_text(corpus, raw, val_fraction)


def _split_text(corpus: str, raw: bytes, val_fraction: float) -> CorpusSplit:
    cut = int(len(raw) * (1.0 - val_fraction))
    while cut < len(raw) and (raw[cut] & 0xC0) == 0x80:  # a UTF-8 continuation byte
        cut += 1
    _check_sizes(corpus, cut, len(raw) - cut, val_fraction)
    try:
        train, val = raw[:cut].decode("utf-8"), raw[cut:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"corpus {corpus!r} is not valid UTF-8: {e}") from e
    return CorpusSplit([train], [val], cut, len(raw) - cut)


def _split_documents(corpus: str, documents: list[str], val_fraction: float) -> CorpusSplit:
    if len(documents) < 2:
        raise DataError(
            f"corpus {corpus!r} needs at least 2 documents to hold out a validation split"
        )
    sizes = [len(doc.encode("utf-8")) for doc in documents]
    target, held_out, n_val = val_fraction * sum(sizes), 0, 0
    while n_val < len(documents) - 1 and held_out < target:
        n_val += 1
        held_out += sizes[-n_val]
    cut = len(documents) - n_val
    _check_sizes(corpus, sum(sizes) - held_out, held_out, val_fraction)
    return CorpusSplit(documents[:cut], documents[cut:], sum(sizes) - held_out, held_out)


def _check_sizes(corpus: str, train_bytes: int, val_bytes: int, val_fraction: float) -> None:
    if train_bytes == 0 or val_bytes == 0:
        raise DataError(
            f"corpus {corpus!r} is too small to hold out val_fraction={val_fraction} "
            f"({train_bytes} training and {val_bytes} validation bytes)"
        )


def _jsonl_documents(corpus: str, raw: bytes) -> list[str]:
    documents = []
    # Split on b"\n" only: JSON strings may hold U+2028, which str.splitlines() would split on.
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise DataError(f"corpus {corpus!r}, line {number}: invalid JSON ({e})") from e
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise DataError(f'corpus {corpus!r}, line {number}: expected {{"text": "..."}}')
        documents.append(record["text"])
    return documents


def _parquet_documents(corpus: str, raw: bytes) -> list[str]:
    try:
        frame = pd.read_parquet(io.BytesIO(raw), columns=["text"])
    except ValueError as e:  # pyarrow's ArrowInvalid: not parquet, or no such column
        reason = str(e).splitlines()[0]
        raise DataError(f"corpus {corpus!r}: cannot read a 'text' column ({reason})") from e
    texts = frame["text"].dropna().tolist()
    if not all(isinstance(text, str) for text in texts):
        raise DataError(f"corpus {corpus!r}: the 'text' column must hold strings")
    return texts
