"""Atomic file writes: a reader sees a file's old content or the complete new one, never a part.

    atomic_write_text(path, text)
    with atomic_open(path) as f:        # binary; streamed writes (token files)
        f.write(data)

Checkpoints, the data cache and the measured-peak cache all write through here. Parallel sweep
workers may write the same path at once: each writes its own temporary file and the last
`os.replace` wins. A link planted at `path` is replaced, never written through.

A temporary file is named after its writer (`.<name>.<pid>-<start>@<host>.<random>.tmp`): a
writer killed mid-write (`kill -9`) leaves it behind, and the next write of the same path on the
same host removes the temporaries of writers that are gone (a checkpoint's are its size).
"""

from __future__ import annotations

import glob
import os
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from minimind.foundations.processes import is_alive, start_time


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
    remove_dead_temporaries(path)
    # mkstemp: a unique name, so parallel writers of one path (sweep workers) never share it.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=_writer_prefix(path), suffix=".tmp")
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


def remove_dead_temporaries(path: str | Path) -> list[Path]:
    """Remove the temporary files of `path` left by writers on this host that are gone (killed
    mid-write); those of live writers, of other hosts and of unknown writers stay. The removed."""
    path = Path(path)
    head, here = f".{path.name}.", socket.gethostname()
    removed = []
    for stray in path.parent.glob(f"{glob.escape(head)}*@*.tmp"):
        writer, _, host_and_random = stray.name[len(head) : -len(".tmp")].partition("@")
        pid, _, started = writer.partition("-")
        host = host_and_random.rpartition(".")[0]
        if host != here or not pid.isdigit() or not started.isdigit():
            continue
        if is_alive(int(pid), None if started == "0" else started):
            continue
        stray.unlink(missing_ok=True)
        removed.append(stray)
    return removed


def _writer_prefix(path: Path) -> str:
    """`.<name>.<pid>-<start>@<host>.`: whose temporary file it is (the start time tells a reused
    pid from the writer; 0 where it cannot be read)."""
    pid = os.getpid()
    return f".{path.name}.{pid}-{start_time(pid) or 0}@{socket.gethostname()}."


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
