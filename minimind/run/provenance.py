"""Where a run's numbers came from besides its spec and seed: the source tree's state (is it the
commit the run is tagged with, or that commit with changes, and which) and the machine's
libraries and CPU. Same spec and seed give the same numbers bit for bit on one CPU thread, on the
same CPU family and torch build: these tags say which family and build a run had."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minimind.record import (
    GIT_DIFF_ARTIFACT,
    TORCH_CONFIG_ARTIFACT,
    environment_tags,
)
from minimind.training.machine import environment

if TYPE_CHECKING:
    import torch

    from minimind.tracking import RunHandle
    from minimind.tracking.rank_zero import NullRunHandle


@dataclass(frozen=True)
class SourceState:
    """The git working tree's state: `dirty` None outside a git tree; `diff` the changes to the
    checked-out commit (tracked files' diff, then the untracked files' names), empty when clean."""

    dirty: bool | None
    diff: str


def source_state(directory: str | Path | None = None) -> SourceState:
    """The state of the git tree at `directory` (default: the working directory, where the
    tracker reads `git_commit`)."""
    status = _git(directory, "status", "--porcelain", "--untracked-files=all")
    if status is None:
        return SourceState(None, "")
    if not status.strip():
        return SourceState(False, "")
    untracked = [line[3:] for line in status.splitlines() if line.startswith("??")]
    diff = _git(directory, "diff", "--no-color", "--no-ext-diff", "HEAD") or ""
    listing = "".join(f"# untracked: {name}\n" for name in untracked)
    return SourceState(True, listing + diff)


def _git(directory: str | Path | None, *args: str) -> str | None:
    try:
        result = subprocess.run(
            ["git", *args], cwd=directory, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def record_provenance(run: RunHandle | NullRunHandle, device: torch.device) -> None:
    """Tag `run` with the environment and the tree's dirty flag; log torch's whole build
    configuration and, when the tree is dirty, its diff. A reopened run is retagged: it trains
    from now on where these say."""
    import torch

    state = source_state()
    run.set_tags(environment_tags(environment(device), state.dirty))
    run.log_text(torch.__config__.show(), TORCH_CONFIG_ARTIFACT)
    if state.dirty:
        run.log_text(state.diff, GIT_DIFF_ARTIFACT)
