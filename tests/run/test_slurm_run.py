"""`minimind run --launcher slurm` on a real single-node Slurm (tests/slurm_cluster.py): the same
numbers as a local run, a cancelled job's run KILLED and resumed to the same numbers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_runs import children, curves
from slurm_cluster import slurm_cluster  # noqa: F401  (fixture)

from minimind.cli import main
from minimind.run.cluster.slurm import Ledger, queue_states

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]
ARMS = {"model.norm": ["rmsnorm", "layernorm"]}
FINAL = ("val/loss", "val/bpb")
# Long enough that a job signalled after its first checkpoint is still training (about 10 ms a
# step here), with a checkpoint to resume from every 20 steps.
LONG_TRAIN = {"steps": 2000, "checkpoint_every": 20, "eval_every": 1000, "log_every": 50}
TIMEOUT_S = 600


def submit(spec: Path, folder: Path, *extra: str) -> subprocess.Popen:
    """The submitting command in its own process (so that a test can stop it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "minimind", "run", str(spec), "--launcher", "slurm"]
    command += ["-o", f"launcher.folder={folder}", *extra]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(process: subprocess.Popen) -> tuple[int, str]:
    out, _ = process.communicate(timeout=TIMEOUT_S)
    return process.returncode, out


def test_a_slurm_run_gives_the_local_runs_numbers_bit_for_bit(
    write_spec,
    mlflow_uri,
    tmp_path,
    one_thread,
    capsys,  # noqa: F811
):
    spec = write_spec(seeds=[0, 1], ablate=ARMS)
    assert main(["run", str(spec), "-o", "tracking.experiment=local"]) == 0
    capsys.readouterr()
    code, out = finish(submit(spec, tmp_path / "slurm", "-o", "tracking.experiment=onslurm"))
    assert code == 0, out
    assert out.count("submitted as job") == 4
    local, remote = children(mlflow_uri, "local"), children(mlflow_uri, "onslurm")
    assert sorted(local) == sorted(remote) and len(local) == 4
    for name, run in remote.items():
        assert run.info.status == "FINISHED"
        assert run.data.tags["slurm.job_id"]
        assert all(key in run.data.metrics for key in FINAL)
        assert curves(mlflow_uri, run) == curves(mlflow_uri, local[name]), name
    # Run again with --resume: every run FINISHED, nothing is submitted or trained.
    code, out = finish(
        submit(spec, tmp_path / "slurm", "-o", "tracking.experiment=onslurm", "--resume")
    )
    assert code == 0, out
    assert "submitted" not in out and out.count("already FINISHED, skipped") == 4


def test_a_cancelled_job_ends_its_run_killed_and_a_resubmission_resumes_it_bit_for_bit(
    write_spec,
    mlflow_uri,
    tmp_path,
    one_thread,
    capsys,  # noqa: F811
):
    spec = write_spec(train=LONG_TRAIN)
    assert main(["run", str(spec), "-o", "tracking.experiment=local"]) == 0
    capsys.readouterr()
    folder, experiment = tmp_path / "slurm", "-o tracking.experiment=onslurm".split()
    submitter = submit(spec, folder, *experiment)
    checkpoint: Path | None = None
    deadline = time.monotonic() + TIMEOUT_S
    while checkpoint is None and time.monotonic() < deadline:
        found = list((tmp_path / "checkpoints" / "onslurm").glob("*/*/seed0/*/last.pt"))
        checkpoint = found[0] if found else None
        time.sleep(0.2)
    assert checkpoint is not None, "the job wrote no checkpoint"
    (ledger,) = (folder / "ledgers").glob("*.json")
    (job_id,) = Ledger.open(folder, ledger.stem).jobs.values()
    subprocess.run(["scancel", job_id], check=True)
    code, out = finish(submitter)
    assert code == 1, out
    assert f"job {job_id} ended CANCELLED, run KILLED" in out and "log: " in out
    (run,) = children(mlflow_uri, "onslurm").values()
    assert run.info.status == "KILLED"
    logged = curves(mlflow_uri, run).get("train/loss", [])  # none before its first log step
    assert max((step for step, _ in logged), default=0) < LONG_TRAIN["steps"]
    assert queue_states([job_id])[job_id] == "CANCELLED"

    code, out = finish(submit(spec, folder, *experiment, "--resume"))
    assert code == 0, out
    (resumed,) = children(mlflow_uri, "onslurm").values()
    assert resumed.info.run_id == run.info.run_id and resumed.info.status == "FINISHED"
    (local,) = children(mlflow_uri, "local").values()
    assert curves(mlflow_uri, resumed) == curves(mlflow_uri, local)
    job_logs = "".join(p.read_text() for p in folder.glob("*/*_log.*"))
    assert "resumed at step" in job_logs


def test_a_job_warned_of_its_time_limit_is_requeued_and_resumes_bit_for_bit(
    write_spec, mlflow_uri, tmp_path, one_thread, capsys
):
    """Slurm's warning signal (USR2, what it sends `launcher.signal_delay_s` before the time limit
    and submitit's stand-in for a preemption) stops the command, requeues the job, and the
    requeued job continues the run from its checkpoint to the uninterrupted run's numbers."""
    spec = write_spec(train=LONG_TRAIN)
    assert main(["run", str(spec), "-o", "tracking.experiment=local"]) == 0
    capsys.readouterr()
    folder, experiment = tmp_path / "slurm", "-o tracking.experiment=onslurm".split()
    submitter = submit(spec, folder, *experiment)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if list((tmp_path / "checkpoints" / "onslurm").glob("*/*/seed0/*/last.pt")):
            break
        time.sleep(0.2)
    (ledger,) = (folder / "ledgers").glob("*.json")
    (job_id,) = Ledger.open(folder, ledger.stem).jobs.values()
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
    code, out = finish(submitter)
    assert code == 0, out
    (run,) = children(mlflow_uri, "onslurm").values()
    assert run.info.status == "FINISHED"
    (local,) = children(mlflow_uri, "local").values()
    assert curves(mlflow_uri, run) == curves(mlflow_uri, local)
    job_logs = "".join(p.read_text() for p in folder.glob("*/*_log.*"))
    assert "Requeued job" in job_logs and "resumed at step" in job_logs
