"""`minimind run --resume` on this host does not take over a run that a live Slurm job trains:
the jobs come from the ledger and the runs' `slurm.job_id` tags, their states from `squeue`
(a stand-in here, answering as Slurm's does)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from mlflow import MlflowClient

from minimind import record
from minimind.cli import main
from minimind.run.plan import plan_run
from minimind.spec import load_spec


@pytest.fixture
def squeue(tmp_path: Path, monkeypatch):
    """`answer(text)`: what the stand-in `squeue` on PATH prints (`<job id>|<state>` lines)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "squeue"

    def answer(text: str) -> None:
        script.write_text(f"#!/bin/sh\nprintf '{text}'\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)

    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return answer


@pytest.fixture
def job_run(write_spec, mlflow_uri, tmp_path) -> dict:
    """An invocation whose parent and child `base/seed0` a Slurm job (4242) is training."""
    path = write_spec(launcher={"folder": str(tmp_path / "slurm")})
    plan = plan_run(load_spec(path))
    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("tiny")
    parent_tags = {record.ROLE_TAG: record.PARENT_ROLE, **record.parent_tags(plan.plan_hash)}
    parent = client.create_run(experiment, tags=parent_tags, run_name="tiny").info.run_id
    child_tags = {
        record.ROLE_TAG: record.CHILD_ROLE,
        record.PARENT_TAG: parent,
        record.SLURM_JOB_TAG: "4242",
    }
    child = client.create_run(experiment, tags=child_tags, run_name="base/seed0").info.run_id
    return {"path": path, "client": client, "parent": parent, "child": child}


def test_a_run_a_live_job_trains_is_not_resumed_here(job_run, squeue, capsys) -> None:
    squeue("4242|RUNNING\n")
    assert main(["run", str(job_run["path"]), "--resume", "--launcher", "local"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: parent run {job_run['parent']}: base/seed0 is trained by Slurm job 4242, still "
        "queued or running; resume it with --launcher slurm (which waits for them), or scancel "
        "them first"
    )
    client = job_run["client"]
    assert client.get_run(job_run["child"]).info.status == "RUNNING"  # left to its job
    assert client.get_run(job_run["parent"]).info.status == "RUNNING"


def test_a_queued_job_of_the_ledger_counts_too(job_run, squeue, tmp_path, capsys) -> None:
    ledger = tmp_path / "slurm" / "ledgers" / f"{job_run['parent']}.json"
    ledger.parent.mkdir(parents=True)
    ledger.write_text(json.dumps({"base/seed1": "4243_0"}))
    squeue("4243_0|PENDING\n")  # 4242 has ended, 4243_0 waits for a node
    assert main(["run", str(job_run["path"]), "--resume", "--launcher", "local"]) == 2
    assert "base/seed1 is trained by Slurm job 4243_0" in capsys.readouterr().err


def test_a_run_whose_job_has_ended_is_resumed_here(job_run, squeue, capsys) -> None:
    squeue("")  # gone from the queue
    assert main(["run", str(job_run["path"]), "--resume", "--launcher", "local"]) == 0
    # The same run, closed as its process is gone, reopened and trained here.
    assert job_run["client"].get_run(job_run["child"]).info.status == "FINISHED"
