"""Atomic writes: a reader sees the old content or the whole new one, and nothing is left over."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from minimind.foundations.atomic_file import atomic_open, atomic_write_text


def test_atomic_open_leaves_nothing_on_failure(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_open(path) as f:
        f.write(b"half-written")
        raise RuntimeError("interrupted")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_atomic_write_text_replaces_the_file_as_utf8_and_creates_its_folder(tmp_path):
    path = tmp_path / "new" / "meta.json"
    atomic_write_text(path, "first")
    atomic_write_text(path, "ünïcode ✓")
    assert path.read_bytes() == "ünïcode ✓".encode()
    assert [p.name for p in path.parent.iterdir()] == ["meta.json"]


@pytest.mark.parametrize("mask", [0o002, 0o022, 0o077])
def test_files_get_the_mode_of_the_user_s_umask(tmp_path: Path, mask: int) -> None:
    """A file written atomically is as readable as one written with open(): 0666 minus the
    umask (mkstemp alone gives 0600, which other users of a shared directory cannot read)."""
    previous = os.umask(mask)
    try:
        atomic_write_text(tmp_path / "atomic.txt", "x")
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(previous)
    mode = stat.S_IMODE((tmp_path / "atomic.txt").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == 0o666 & ~mask


WRITER = """
import sys, time
from minimind.foundations.atomic_file import atomic_open
with atomic_open(sys.argv[1]) as f:
    f.write(b"half of a checkpoint")
    f.flush()
    print("writing", flush=True)
    time.sleep(600)
"""


def _writer(path: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline() == "writing\n"
    return process


def test_the_temporaries_of_a_killed_writer_are_removed_by_the_next_write(tmp_path):
    """`kill -9` mid-write leaves the writer's temporary file; the next write of that path
    removes it, and leaves the temporary of a writer still at work."""
    path = tmp_path / "last.pt"
    killed, working = _writer(path), _writer(path)
    try:
        killed.kill()
        killed.wait()
        strays = sorted(p.name for p in tmp_path.iterdir())
        assert len(strays) == 2 and all(s.startswith(".last.pt.") for s in strays)
        atomic_write_text(path, "new")
        stray, written = sorted(p.name for p in tmp_path.iterdir())
        assert written == "last.pt" and stray in strays
        assert stray.startswith(f".last.pt.{working.pid}-")
    finally:
        working.kill()
        working.wait()
    unknown = tmp_path / ".last.pt.abc123.tmp"  # a writer this version cannot name: kept
    unknown.write_bytes(b"x")
    atomic_write_text(path, "newer")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".last.pt.abc123.tmp", "last.pt"]
