"""A run's provenance: the git tree's dirty flag and diff, read from a real repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

from minimind.run.provenance import source_state


def git(directory: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=directory, check=True, capture_output=True)


def test_a_clean_tree_is_clean_and_a_changed_one_carries_its_diff(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "lab@example.com")
    git(tmp_path, "config", "user.name", "lab")
    (tmp_path / "model.py").write_text("width = 64\n")
    git(tmp_path, "add", "model.py")
    git(tmp_path, "commit", "-q", "-m", "first")
    assert source_state(tmp_path).dirty is False and source_state(tmp_path).diff == ""

    (tmp_path / "model.py").write_text("width = 128\n")
    (tmp_path / "notes.txt").write_text("new\n")
    state = source_state(tmp_path)
    assert state.dirty is True
    assert "-width = 64\n+width = 128\n" in state.diff
    assert "# untracked: notes.txt\n" in state.diff


def test_outside_a_git_tree_the_state_is_unknown(tmp_path: Path) -> None:
    assert source_state(tmp_path).dirty is None
