"""On-disk cache keys: a stable short name for a set of settings.

Parallel sweep workers may prepare the same cache entry at once, so every file of an entry is
written atomically (`minimind.foundations.atomic_file`): a reader sees the old file, the new one, or none,
never a half-written one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def sha256_hex(data: bytes | str) -> str:
    """Hex SHA-256 of bytes, or of a string's UTF-8 encoding."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def cache_key(fields: dict[str, Any]) -> str:
    """A short, stable directory name for a set of JSON-serialisable settings."""
    return sha256_hex(json.dumps(fields, sort_keys=True))[:16]
