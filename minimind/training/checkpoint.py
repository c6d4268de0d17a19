"""Training checkpoints: atomic saves, safe loads, and the RNG states that make resume bit-exact.

A checkpoint is one `torch.save` file holding a plain dict: the trainer's state (the model,
optimizer and scheduler state dicts, `capture_rng_state()`, the data sampler state, the step, the
elapsed training time) and, stamped on it by `RunCheckpoint`, the ids of the runs that own it.
Everything in it must survive `torch.load(weights_only=True)`: tensors, dicts, lists, tuples,
str, int, float, bool and None.
"""

from __future__ import annotations

import os
import random
import re
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import torch

from minimind.foundations.atomic_file import atomic_write
from minimind.foundations.errors import MinimindError


class CheckpointError(MinimindError):
    """A checkpoint file that cannot be read; the message names the file."""


def previous_path(path: str | Path) -> Path:
    """Where the checkpoint before `path` is kept: `last.pt` -> `last.prev.pt`."""
    path = Path(path)
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Save `state` to `path` atomically (`minimind.foundations.atomic_file`), keeping the checkpoint it
    replaces as `previous_path(path)`: should the new file be damaged later (a full disk, a
    truncated copy), a good one still exists to resume from."""
    path = Path(path)
    if path.is_file():
        previous = previous_path(path)
        try:  # a hard link keeps `path` in place meanwhile; os.replace then swaps atomically
            staged = previous.with_name(f".{previous.name}.link")
            staged.unlink(missing_ok=True)
            os.link(path, staged)
            os.replace(staged, previous)
        except OSError:  # a filesystem without hard links: move it aside instead
            os.replace(path, previous)
    atomic_write(path, lambda f: _torch_save(state, f, path))


class _KeepWriteError:
    """A binary file that remembers the OSError of a failed write: torch's writer may report it
    as its own `inline_container.cc` error, losing the cause (a full disk, a quota), and the
    OSError itself names no file."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.file.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.file.flush()


def _torch_save(state: dict[str, Any], file: IO[bytes], path: Path) -> None:
    sink = _KeepWriteError(file)
    try:
        # cast: torch.save writes to a file object through `write` and `flush` alone.
        torch.save(state, cast(IO[bytes], sink))
    except (RuntimeError, OSError):
        if sink.error is None:
            raise
        # e.g. "[Errno 28] No space left on device: '.../last.pt'"
        raise OSError(sink.error.errno, sink.error.strerror, str(path)) from sink.error


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by `save_checkpoint`, refusing anything but plain data;
    `CheckpointError` naming the file when it cannot be read."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    # Not pickle.UnpicklingError: a file refused by weights_only must stop the run, not be
    # passed over for an older one.
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint ({exc})") from exc


def load_latest_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[dict[str, Any], Path] | None:
    """The checkpoint at `path` and that path, or, if that one is missing or unreadable, the
    previous one (`previous_path`) and its path; None when there is neither. A damaged file is
    named on stderr; when both are damaged, `CheckpointError` names both and how to recover."""
    errors = []
    for candidate in (Path(path), previous_path(path)):
        if not candidate.is_file():
            continue
        try:
            state = load_checkpoint(candidate, map_location)
        except CheckpointError as exc:
            errors.append(str(exc))
            continue
        for error in errors:  # named only here: when none loads, the one error names them all
            print(f"minimind: checkpoint: {error}", file=sys.stderr)
        if errors:
            print(f"minimind: checkpoint: resuming from {candidate} instead", file=sys.stderr)
        return state, candidate
    if errors:
        raise CheckpointError(
            "; ".join(errors) + f"; no checkpoint of this run can be resumed: to start it afresh, "
            f"delete {Path(path).parent} and run again with --resume"
        )
    return None


OWNER_KEY = "run_ids"
"""Where a checkpoint names the runs it belongs to: {"child": id, "parent": id}."""


_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class RunCheckpoint:
    """The checkpoint file of one run, stamped with the ids of the runs that own it
    (`owner`: the MLflow child run's as `child`, its parent's as `parent`).

    `path` is where the runs of one variant × seed keep theirs (`.../seed0/last.pt`, the same for
    every invocation of a spec); each run writes its own file under its child run id (`file`:
    `.../seed0/<child run id>/last.pt`), so two invocations of one spec never write one file.
    The stamp, in the same atomic write as the state, still tells a run its own file from
    another's, and its own from the one an earlier version kept at `path` itself.
    """

    path: Path
    owner: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        child = self.owner.get("child")
        if child is not None and not _RUN_ID.fullmatch(child):  # a run id names a folder
            raise CheckpointError(
                f"{self.path}: not a run id to keep a checkpoint under: {child!r}"
            )

    @property
    def file(self) -> Path:
        """This run's own file: `<folder of path>/<child run id>/<name of path>`; `path` itself
        for a checkpoint of no run."""
        child = self.owner.get("child")
        return self.path.parent / child / self.path.name if child else self.path

    def save(self, state: Mapping[str, Any]) -> None:
        save_checkpoint(self.file, {**state, OWNER_KEY: dict(self.owner)})

    def load(self) -> tuple[dict[str, Any], Path] | None:
        """The latest state of this run and the file it came from (`load_latest_checkpoint`:
        the previous one when the last is damaged): from `file`, or, when that does not exist,
        from `path` where an earlier version kept it, when stamped with this run's
        `owner["child"]`; None when there is none, or only another run's."""
        own = any(p.is_file() for p in (self.file, previous_path(self.file)))
        found = load_latest_checkpoint(self.file if own else self.path)
        if found is None or found[0].get(OWNER_KEY, {}).get("child") != self.owner.get("child"):
            return None
        return found


def seed_everything(seed: int) -> None:
    """Seed every global generator `capture_rng_state` captures."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # every device's generator


def capture_rng_state() -> dict[str, Any]:
    """The state of every global generator a training step may draw from, in weights_only-safe types.

    Keys: `torch` (uint8 tensor), `cuda` (list of uint8 tensors, one per device; empty without
    CUDA), `python` (`random.getstate()` as [version, list of 625 ints, gauss_next]) and `numpy`
    (the legacy global MT19937 state: `keys` int64 tensor [624], `pos`, `has_gauss`,
    `cached_gaussian`).
    """
    version, internal, gauss_next = random.getstate()
    numpy_state = np.random.get_state(legacy=True)
    assert isinstance(numpy_state, tuple)  # legacy=True: the MT19937 tuple, not the dict
    _, keys, pos, has_gauss, cached_gaussian = numpy_state
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "python": [version, list(internal), gauss_next],
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back the generator states captured by `capture_rng_state`.

    CUDA states are restored only when the number of visible devices matches the capture.
    The tensors may be on any device (e.g. a checkpoint loaded with `map_location="cuda"`): the
    generators take their states as CPU tensors.
    """
    torch.set_rng_state(state["torch"].cpu())
    cuda_states = [s.cpu() for s in state["cuda"]]
    if cuda_states and torch.cuda.is_available() and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_states)
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    np_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            np_state["keys"].cpu().numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
