"""Whether a directory can be created and written in, found without writing anything: the output
locations of a spec are checked so before its first file is written (`minimind.run.plan`)."""

from __future__ import annotations

import os
from pathlib import Path


def unwritable_dir(directory: str | Path) -> str | None:
    """Why `directory` cannot be created (with its parents) or written in, or None; creates
    nothing. Judged at the nearest path that exists, which must be a directory this process may
    write in."""
    path = existing = Path(directory)
    # lexists: a dangling symlink is in mkdir's way like a file
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    where = str(path) if existing == path else f"cannot create {path}: {existing}"
    if not existing.is_dir():
        return f"{where} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{where} is not writable"
    return None
