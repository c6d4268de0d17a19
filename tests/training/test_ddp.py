"""DDP with torchrun: the batch split, and `minimind run --nproc 2` (gloo, 2 CPU processes)
against a single process with the same global batch and data order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from minimind.cli import main
from minimind.data.batches import TrainBatches
from minimind.run.plan import plan_run
from minimind.spec import SpecError, load_spec
from minimind.training.distributed import local_batch_size, torchrun_arguments

pytestmark = pytest.mark.usefixtures("one_thread")

RUN_TIMEOUT_S = 500


def test_each_rank_reads_its_disjoint_slice_of_the_global_batch_in_the_single_process_order():
    tokens = np.arange(1000, dtype=np.uint16)
    single = TrainBatches(tokens, batch_size=6, seq_len=8, seed=3)
    ranks = [TrainBatches(tokens, 6, 8, seed=3, rank=r, world=3) for r in range(3)]
    for _ in range(4):
        expected = next(single)
        shares = [next(r) for r in ranks]
        assert [s.shape for s in shares] == [(2, 8)] * 3
        assert np.array_equal(np.concatenate(shares), expected)  # disjoint, in order, all rows
    assert ranks[2].state_dict() == single.state_dict()  # one checkpoint resumes every rank
    with pytest.raises(ValueError, match="does not split evenly"):
        TrainBatches(tokens, 6, 8, seed=3, rank=0, world=4)


def test_a_global_batch_that_does_not_split_is_a_spec_error(write_spec):
    assert local_batch_size(8, 4) == 2
    with pytest.raises(ValueError, match="does not split evenly over 3 ranks"):
        local_batch_size(4, 3)
    spec = load_spec(write_spec())
    assert plan_run(spec, world_size=2).spec.train.batch_size == 4
    with pytest.raises(SpecError) as err:
        plan_run(spec, world_size=3)
    assert err.value.path == "train.batch_size"


def test_parallel_is_ddp_or_fsdp(write_spec):
    assert load_spec(write_spec(), ["train.parallel=fsdp"]).train.parallel == "fsdp"
    with pytest.raises(SpecError) as err:
        load_spec(write_spec(), ["train.parallel=zero"])
    assert err.value.path == "train.parallel"


def test_nproc_with_an_unsplittable_batch_exits_2_before_launching(write_spec, capsys):
    assert main(["run", str(write_spec()), "--nproc", "3"]) == 2
    assert "train.batch_size: the global batch of 4 rows" in capsys.readouterr().err


def test_the_launcher_is_torchrun_standalone():
    assert torchrun_arguments(4, ["run", "s.yaml"]) == [
        "--standalone",
        "--nproc_per_node=4",
        "-m",
        "minimind",
        "run",
        "s.yaml",
    ]


def history(uri: str, experiment: str, key: str) -> tuple[list, list, list[tuple[int, float]]]:
    """(parent runs, child runs, [(step, value)] of `key` in the only child)."""
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parents = [r for r in runs if r.data.tags.get("minimind.role") == "parent"]
    children = [r for r in runs if r.data.tags.get("minimind.role") == "child"]
    points = client.get_metric_history(children[0].info.run_id, key) if children else []
    return parents, children, sorted((m.step, m.value) for m in points)


def start_ddp(path: Path, cwd: Path, *args: str) -> subprocess.Popen:
    """`minimind run PATH --nproc 2 ARGS` in its own session (a signal reaches every rank)."""
    command = [sys.executable, "-m", "minimind", "run", str(path), "--nproc", "2", *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def ddp_args(tmp_path: Path, name: str) -> list[str]:
    """Overrides that give a DDP launch its own MLflow database and checkpoint directory."""
    uri = f"sqlite:///{tmp_path}/{name}.db"
    return [f"-o=tracking.uri={uri}", f"-o=train.checkpoint_dir={tmp_path / name}"]


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_ranks_match_one_process_and_log_one_run(write_spec, mlflow_uri, tmp_path, parallel):
    train = {"steps": 10, "log_every": 1, "eval_every": 5, "eval_batches": 3, "grad_accum": 2}
    train["parallel"] = parallel
    # fp32: under bf16 autocast the half batches' matmuls round differently from the whole one's.
    train["precision"] = "fp32"
    path = write_spec(train=train)
    assert main(["run", str(path)]) == 0
    process = start_ddp(path, tmp_path, *ddp_args(tmp_path, "ddp"))
    output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    assert process.returncode == 0, output
    # Both ranks walked the same run; rank 0 alone says so, with no warning or banner of torch's.
    assert output.count("FINISHED at step 10") == 1, output
    assert "FutureWarning" not in output and "OMP_NUM_THREADS" not in output, output

    ddp_uri = f"sqlite:///{tmp_path}/ddp.db"
    parents, children, ddp_loss = history(ddp_uri, "tiny", "train/loss")
    assert len(parents) == 1 and len(children) == 1  # rank 1 created no runs
    assert children[0].info.status == "FINISHED"
    _, _, single_loss = history(mlflow_uri, "tiny", "train/loss")
    assert [s for s, _ in ddp_loss] == [s for s, _ in single_loss] == list(range(1, 11))
    difference = max(abs(a - b) for (_, a), (_, b) in zip(ddp_loss, single_loss, strict=True))
    print(f"{parallel}: max |train/loss 2 ranks - 1 process| = {difference:.3g}")
    assert difference < 1e-5
    assert single_loss[0][1] - single_loss[-1][1] > 0.1  # the curve moves: a real check
    val = [history(u, "tiny", "val/loss_sampled")[2] for u in (ddp_uri, mlflow_uri)]
    assert [s for s, _ in val[0]] == [s for s, _ in val[1]] == [5, 10]
    assert max(abs(a - b) for (_, a), (_, b) in zip(*val, strict=True)) < 1e-5
    exact = [history(u, "tiny", "val/loss")[2] for u in (ddp_uri, mlflow_uri)]
    assert [s for s, _ in exact[0]] == [10] and abs(exact[0][0][1] - exact[1][0][1]) < 1e-5
    assert len(list((tmp_path / "ddp").rglob("last.pt"))) == 1  # written by rank 0 only


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_a_stopped_two_rank_run_resumes_to_the_uninterrupted_curve(write_spec, tmp_path, parallel):
    steps = 200
    train = {"steps": steps, "log_every": 1, "eval_every": 100, "checkpoint_every": 20}
    train |= {"precision": "fp32", "parallel": parallel}
    path = write_spec(train={**train, "sample_tokens": 0})
    whole = start_ddp(path, tmp_path, *ddp_args(tmp_path, "whole"))
    output, _ = whole.communicate(timeout=RUN_TIMEOUT_S)
    assert whole.returncode == 0, output

    # Stopped by SIGTERM after its first checkpoint, then resumed with the same world size.
    args = ddp_args(tmp_path, "stopped")
    process = start_ddp(path, tmp_path, *args)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not list((tmp_path / "stopped").rglob("last.pt")) and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGTERM)
    output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    assert process.returncode != 0, output
    stopped_uri = f"sqlite:///{tmp_path}/stopped.db"
    _, children, before = history(stopped_uri, "tiny", "train/loss")
    assert children[0].info.status == "KILLED" and 0 < len(before) < steps, output

    resumed = start_ddp(path, tmp_path, *args, "--resume")
    output, _ = resumed.communicate(timeout=RUN_TIMEOUT_S)
    assert resumed.returncode == 0, output
    parents, children, after = history(stopped_uri, "tiny", "train/loss")
    assert len(parents) == 1 and len(children) == 1
    assert children[0].info.status == "FINISHED"
    _, _, reference = history(f"sqlite:///{tmp_path}/whole.db", "tiny", "train/loss")
    assert [s for s, _ in after] == list(range(1, steps + 1))  # none lost, none twice
    assert after == reference  # bit for bit: the same ranks, data and reduction order


@pytest.mark.slow
def test_ctrl_c_on_two_ranks_exits_130_with_one_line_and_the_run_killed(write_spec, tmp_path):
    """Ctrl-C reaches the whole process group (torchrun and both ranks), as from a terminal."""
    train = {"steps": 100_000, "log_every": 1, "eval_every": 100_000, "checkpoint_every": 20}
    path = write_spec(train={**train, "sample_tokens": 0})
    args = ddp_args(tmp_path, "interrupted")
    process = start_ddp(path, tmp_path, *args)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not list((tmp_path / "interrupted").rglob("last.pt")) and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    assert process.returncode == 130, output
    assert output.count("interrupted") == 1, output
    assert "Traceback" not in output and "torch.distributed" not in output, output
    parents, children, _ = history(f"sqlite:///{tmp_path}/interrupted.db", "tiny", "train/loss")
    assert [run.info.status for run in parents + children] == ["KILLED", "KILLED"], output


@pytest.mark.parametrize(
    ("failure", "code", "said"),
    [
        ("signal", 130, ""),  # Ctrl-C to the launcher: the ranks said it
        (2, 2, ""),  # a rank's own error, which it printed
        (-signal.SIGKILL, 137, "error: rank 1 was killed by SIGKILL\n"),
    ],
)
def test_the_launcher_exits_as_one_process_would(monkeypatch, capsys, failure, code, said):
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from minimind.training import distributed

    def run(args):
        assert args.nproc_per_node == "2" and args.standalone
        if failure == "signal":
            raise SignalException("got signal: 2", sigval=signal.SIGINT)
        error = ProcessFailure(local_rank=1, pid=123, exitcode=failure, error_file="")
        raise ChildFailedError("minimind", {1: error})

    monkeypatch.setattr(torchrun, "run", run)
    assert distributed.launch(2, ["run", "s.yaml"]) == code
    assert capsys.readouterr().err == said
