"""On-disk cache plumbing: content keys and atomic writes.

Parallel sweep workers may prepare the same cache entry at once, so every file is written to a
private temporary name and moved into place with `os.replace`; a reader sees the old file, the
new one, or none, never a half-written one.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def sha256_hex(data: bytes | str) -> str:
    """Hex SHA-256 of bytes, or of a string's UTF-8 encoding."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def cache_key(fields: dict[str, Any]) -> str:
    """A short, stable directory name for a set of JSON-serialisable settings."""
    return sha256_hex(json.dumps(fields, sort_keys=True))[:16]


@contextmanager
def atomic_open(path: Path) -> Iterator[IO[bytes]]:
    """Write `path` (binary) through a temporary file in the same directory; replace only on success."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str) -> None:
    """Write a UTF-8 text file atomically."""
    with atomic_open(path) as f:
        f.write(text.encode())
