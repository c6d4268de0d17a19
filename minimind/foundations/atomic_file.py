"""Atomic file writes: a reader sees a file's old content or the complete new one, never a part.

    atomic_write_text(path, text)
    with atomic_open(path) as f:        # binary; streamed writes (token files)
        f.write(data)

Checkpoints, the data cache and the measured-peak cache all write through here. Parallel sweep
workers may write the same path at once: each writes its own temporary file and the last
`os.replace` wins.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_open(path: str | Path) -> Iterator[IO[bytes]]:
    """Open `path` for binary writing so that readers see either the old content or the complete
    new one.

    The body writes a temporary file in the same directory (same filesystem, so the rename is
    atomic); it is flushed and fsynced before `os.replace`. If the body raises, the temporary
    file is removed and `path` keeps its previous content; a process killed mid-write leaves
    `path` untouched too (and a stray `.<name>.*.tmp`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp: a unique name, so parallel writers of one path (sweep workers) never share it.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600; the result must be as shared as any file the user makes
        # (a results directory shared by a team, the nodes of a multi-node run).
        os.chmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """`write(f)` into `path` atomically (see `atomic_open`)."""
    with atomic_open(path) as f:
        write(f)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` as UTF-8, atomically (see `atomic_open`)."""
    with atomic_open(path) as f:
        f.write(text.encode())


def _umask() -> int:
    # The only way to read the umask is to set it; put it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    # Persists the rename itself; not every platform can open a directory.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
