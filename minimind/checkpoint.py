"""Training checkpoints: atomic writes, safe loads, and the RNG states that make resume bit-exact.

A checkpoint is one `torch.save` file holding a plain dict. The runner stores in it the model,
optimizer and scheduler state dicts, `capture_rng_state()`, the data sampler state, the step, the
tokens seen, the elapsed training time and the MLflow run ids. Everything in it must survive
`torch.load(weights_only=True)`: tensors, dicts, lists, tuples, str, int, float, bool and None.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch


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


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Save `state` to `path` atomically (see `atomic_write`)."""
    atomic_write(path, lambda f: torch.save(state, f))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by `save_checkpoint`, refusing anything but plain data."""
    return torch.load(path, map_location=map_location, weights_only=True)


def capture_rng_state() -> dict[str, Any]:
    """The state of every global generator a training step may draw from, in weights_only-safe types.

    Keys: `torch` (uint8 tensor), `cuda` (list of uint8 tensors, one per device; empty without
    CUDA), `python` (`random.getstate()` as [version, list of 625 ints, gauss_next]) and `numpy`
    (the legacy global MT19937 state: `keys` int64 tensor [624], `pos`, `has_gauss`,
    `cached_gaussian`).
    """
    version, internal, gauss_next = random.getstate()
    _, keys, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
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
