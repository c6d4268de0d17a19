"""Checkpoints: everything the runner saves round-trips under weights_only=True, RNG states
restore exactly, and a write that fails or is killed leaves the previous checkpoint intact."""

from __future__ import annotations

import errno
import io
import os
import pickle
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from minimind.foundations.atomic_file import atomic_write
from minimind.training.checkpoint import (
    CheckpointError,
    RunCheckpoint,
    capture_rng_state,
    load_checkpoint,
    load_latest_checkpoint,
    previous_path,
    restore_rng_state,
    save_checkpoint,
)


def training_state() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": capture_rng_state(),
        "sampler": {"seed": 1, "position": 1234, "order": [3, 1, 2]},
        "step": 17,
        "tokens_seen": 17 * 2048,
        "elapsed_s": 12.5,
        "run_ids": {"parent": "a" * 32, "child": "b" * 32},
    }


def assert_same(a: object, b: object) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def test_round_trip_under_weights_only(tmp_path: Path) -> None:
    state = training_state()
    path = tmp_path / "ckpt" / "step17.pt"
    save_checkpoint(path, state)
    assert_same(state, load_checkpoint(path))
    assert_same(state, torch.load(path, weights_only=True))
    assert [p.name for p in path.parent.iterdir()] == ["step17.pt"]  # no temp file left


def test_rng_state_restores_every_generator(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "c.pt", {"rng": capture_rng_state()})
    expected = (torch.rand(5), random.random(), np.random.rand(3), torch.randn(2))
    restore_rng_state(load_checkpoint(tmp_path / "c.pt")["rng"])
    again = (torch.rand(5), random.random(), np.random.rand(3), torch.randn(2))
    assert torch.equal(expected[0], again[0]) and torch.equal(expected[3], again[3])
    assert expected[1] == again[1]
    np.testing.assert_array_equal(expected[2], again[2])


def test_load_refuses_arbitrary_objects(tmp_path: Path) -> None:
    torch.save({"fn": Path("x")}, tmp_path / "unsafe.pt")
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(tmp_path / "unsafe.pt")


class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("cannot pickle this")


def test_failed_write_keeps_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1, "w": torch.ones(3)})

    with pytest.raises(RuntimeError, match="cannot pickle"):
        save_checkpoint(path, {"step": 2, "w": torch.zeros(1000), "bad": Unpicklable()})

    def half_then_crash(f) -> None:
        f.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, half_then_crash)

    assert_same(load_checkpoint(path), {"step": 1, "w": torch.ones(3)})
    # no stray temporary file; the rotation's copy of the one it would have replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.prev.pt", "last.pt"]


def test_kill_during_write_keeps_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1})
    script = textwrap.dedent(
        f"""
        import os, signal
        from minimind.foundations.atomic_file import atomic_write

        def write(f):
            f.write(b"x" * 100_000)
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)

        atomic_write({str(path)!r}, write)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert result.returncode == -9
    assert load_checkpoint(path) == {"step": 1}


def test_a_truncated_checkpoint_is_named_and_resume_falls_back_to_the_previous_one(
    tmp_path, capsys
):
    """`last.pt` cut short (a full disk, an interrupted copy): the error names the file, and the
    checkpoint it replaced, kept by the rotation, is loaded instead."""
    path = tmp_path / "run" / "last.pt"
    first = {"step": 1, "weights": torch.arange(50_000, dtype=torch.float32)}
    second = {"step": 2, "weights": torch.arange(50_000, dtype=torch.float32) * 2}
    save_checkpoint(path, first)
    save_checkpoint(path, second)
    assert load_latest_checkpoint(path)[0]["step"] == 2
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)

    with pytest.raises(CheckpointError, match=re.escape(str(path))):
        load_checkpoint(path)
    state, loaded = load_latest_checkpoint(path)
    assert state["step"] == 1 and torch.equal(state["weights"], first["weights"])
    assert loaded == previous_path(path)  # what the resume message names
    err = capsys.readouterr().err
    assert str(path) in err and str(previous_path(path)) in err

    with previous_path(path).open("r+b") as f:  # both damaged: an error naming both
        f.truncate(10)
    with pytest.raises(CheckpointError) as caught:
        load_latest_checkpoint(path)
    assert str(path) in str(caught.value) and str(previous_path(path)) in str(caught.value)
    # ... and how to recover: start the seed afresh
    assert f"delete {path.parent} and run again with --resume" in str(caught.value)
    assert load_latest_checkpoint(tmp_path / "none" / "last.pt") is None


def test_a_full_disk_is_reported_as_such_with_the_path(tmp_path, monkeypatch):
    """The disk fills while torch writes the checkpoint: the error is `No space left on device`
    with the checkpoint's path, not torch's `inline_container.cc` message, and the previous
    checkpoint stays."""
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1})

    class FullDisk(io.FileIO):
        def write(self, data) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("minimind.foundations.atomic_file.os.fdopen", FullDisk)
    with pytest.raises(OSError, match=rf"No space left on device: '{re.escape(str(path))}'"):
        save_checkpoint(path, {"step": 2, "w": torch.ones(10_000)})

    real_save = torch.save

    def save_as_torch_reports_it(state, file) -> None:  # torch's C++ writer wraps the OSError
        try:
            real_save(state, file)
        except OSError as exc:
            raise RuntimeError("[enforce fail at inline_container.cc:664] unexpected pos") from exc

    monkeypatch.setattr(torch, "save", save_as_torch_reports_it)
    with pytest.raises(OSError, match=rf"No space left on device: '{re.escape(str(path))}'"):
        save_checkpoint(path, {"step": 2, "w": torch.ones(10_000)})
    monkeypatch.undo()
    assert load_checkpoint(path) == {"step": 1}


def test_a_run_checkpoint_loads_for_its_own_run_only(tmp_path: Path) -> None:
    """Each run keeps its checkpoint under its run id: two invocations of one spec (the same
    path) never write one file. The stamp of the runs that saved a checkpoint still tells a
    run its own, and a checkpoint an earlier version kept at the shared path loads for its run."""
    path = tmp_path / "run" / "last.pt"
    mine = RunCheckpoint(path, {"parent": "p1", "child": "c1"})
    assert mine.load() is None  # nothing saved yet
    mine.save({"step": 3})
    assert mine.file == tmp_path / "run" / "c1" / "last.pt" and not path.exists()
    assert load_checkpoint(mine.file) == {"step": 3, "run_ids": {"parent": "p1", "child": "c1"}}
    theirs = RunCheckpoint(path, {"parent": "p2", "child": "c2"})
    assert theirs.load() is None
    theirs.save({"step": 5})  # another invocation of the same spec, at the same time
    assert mine.load() == ({"step": 3, "run_ids": {"parent": "p1", "child": "c1"}}, mine.file)
    save_checkpoint(mine.file, {"step": 5, "run_ids": {"parent": "p2", "child": "c2"}})
    assert mine.load() is None  # stamped by another run: not resumed from
    old_style = training_state()  # the trainer's state with its run ids inside
    save_checkpoint(path, old_style)  # where an earlier version kept every run's
    found = RunCheckpoint(path, {"child": "b" * 32}).load()
    assert found is not None and found[1] == path
    assert_same(found[0], old_style)
    assert RunCheckpoint(path, {"child": "c3"}).load() is None


@pytest.mark.parametrize("child", ["../x", "a/b", "", "."])
def test_a_run_id_that_is_no_folder_name_is_refused(tmp_path: Path, child: str) -> None:
    with pytest.raises(CheckpointError, match="not a run id"):
        RunCheckpoint(tmp_path / "last.pt", {"child": child})
