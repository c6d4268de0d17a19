"""On-disk cache plumbing: content keys and atomic writes.

Parallel sweep workers may prepare the same cache entry at once, so every file is written to a
private temporary name and moved into place with `os.replace`; a reader sees the old file, the
new one, or none, never a half-written one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

# Re-exported: token files and metadata use the checkpoints' atomic write (minimind.checkpoint
# imports nothing from minimind.data, so there is no cycle).
from minimind.checkpoint import atomic_open


def sha256_hex(data: bytes | str) -> str:
    """Hex SHA-256 of bytes, or of a string's UTF-8 encoding."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def cache_key(fields: dict[str, Any]) -> str:
    """A short, stable directory name for a set of JSON-serialisable settings."""
    return sha256_hex(json.dumps(fields, sort_keys=True))[:16]


def atomic_write_text(path: Path, text: str) -> None:
    """Write a UTF-8 text file atomically."""
    with atomic_open(path) as f:
        f.write(text.encode())
