"""Sweeps across machines on a real PostgreSQL server: separate `minimind sweep` processes share
one study, and a SIGKILLed worker's trial is failed by its lost heartbeat and run again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from pg_server import postgres_url  # noqa: F401  (fixture)

from minimind.spec import SweepConfig
from minimind.sweep.liveness import WORKER_ATTR
from minimind.sweep.storage import open_storage

pytestmark = pytest.mark.slow
MACHINES = 3
TRIALS = 6  # enough that the machines joining second find trials left
GRACE_S = 4
TIMEOUT_S = 500


def start_machine(path: Path, cwd: Path, host: str) -> subprocess.Popen:
    """One `minimind sweep` process standing in for a machine named `host`: its dead workers are
    seen by the others only through heartbeats, not by process id."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MINIMIND_WORKER_HOST": host}
    return subprocess.Popen(
        [sys.executable, "-m", "minimind", "sweep", str(path)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def running_trial_of(storage: optuna.storages.BaseStorage, host: str) -> tuple[int, int] | None:
    """(trial number, worker pid) of a trial that `host` is running and has opened a run for."""
    if "tiny" not in optuna.get_all_study_names(storage):
        return None
    study = optuna.load_study(study_name="tiny", storage=storage)
    for trial in study.get_trials(states=(TrialState.RUNNING,)):
        record = trial.user_attrs.get(WORKER_ATTR)
        if record and record["trial"] == trial.number and record["host"] == host and record["runs"]:
            return trial.number, record["pid"]
    return None


def test_machines_share_a_postgres_study_and_a_killed_workers_trial_is_retried(
    postgres_url,  # noqa: F811
    write_spec,
    tmp_path,
    mlflow_uri,
):
    sweep = {
        "trials": TRIALS,
        "storage": postgres_url,
        "sampler": {"name": "random", "seed": 0},
        "pruner": "none",
        "params": {"train.optimizer.lr": {"type": "float", "low": 1e-3, "high": 2e-2}},
        "heartbeat_interval": 1,
        "grace_period": GRACE_S,
        "retries": 1,
    }
    # Trials long enough that machine-0 alone cannot finish the study while the others start
    # (a few seconds each on a busy machine): every machine must take part.
    train = {"steps": 160, "eval_every": 40, "log_every": 10, "sample_tokens": 0}
    path = write_spec(sweep=sweep, train=train)
    storage = open_storage(SweepConfig(storage=postgres_url))

    # The first machine creates the study; the others join it once it exists.
    machines = {"machine-0": start_machine(path, tmp_path, "machine-0")}
    deadline = time.monotonic() + TIMEOUT_S
    while "tiny" not in optuna.get_all_study_names(storage) and time.monotonic() < deadline:
        assert machines["machine-0"].poll() is None, machines["machine-0"].communicate()[0]
        time.sleep(0.2)
    for i in range(1, MACHINES):
        machines[f"machine-{i}"] = start_machine(path, tmp_path, f"machine-{i}")

    victim = None
    while victim is None and time.monotonic() < deadline:
        assert machines["machine-1"].poll() is None, "machine-1 ended before it ran a trial"
        victim = running_trial_of(storage, "machine-1")
        time.sleep(0.1)
    assert victim is not None, "machine-1 was never seen running a trial"
    number, pid = victim
    assert pid == machines["machine-1"].pid  # one worker, in the `minimind sweep` process
    os.kill(pid, signal.SIGKILL)

    outputs = {}
    for host, process in machines.items():
        outputs[host], _ = process.communicate(timeout=TIMEOUT_S)
    assert machines["machine-1"].returncode == -signal.SIGKILL
    for host in ("machine-0", "machine-2"):
        assert machines[host].returncode == 0, outputs[host]
    survivors = outputs["machine-0"] + outputs["machine-2"]
    assert f"trial {number}: FAIL, the worker machine-1:{pid} died" in survivors, survivors

    trials = optuna.load_study(study_name="tiny", storage=storage).get_trials()
    assert trials[number].state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == number]
    assert [t.state for t in retries] == [TrialState.COMPLETE]
    assert retries[0].params == trials[number].params
    completed = [t for t in trials if t.state == TrialState.COMPLETE]
    print(f"trials completed with one worker killed: {len(completed)} of {TRIALS} planned")
    assert len(completed) >= TRIALS
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    hosts = {t.user_attrs[WORKER_ATTR]["host"] for t in trials}
    assert hosts == set(machines)  # every machine took part
    killed_run = trials[number].user_attrs[WORKER_ATTR]["runs"][0]
    assert MlflowClient(mlflow_uri).get_run(killed_run).info.status == "FAILED"
