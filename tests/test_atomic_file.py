"""Atomic writes: a reader sees the old content or the whole new one, and nothing is left over."""

from __future__ import annotations

import pytest

from minimind.atomic_file import atomic_open, atomic_write_text


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
