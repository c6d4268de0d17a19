"""Atomic writes: a reader sees the old content or the whole new one, and nothing is left over."""

from __future__ import annotations

import os
import stat
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
