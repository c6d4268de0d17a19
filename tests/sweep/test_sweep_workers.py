"""Parallel workers: `minimind sweep --workers 2` as a real process tree on one study, on SQLite
without lock errors, and on a journal file with one worker SIGKILLed mid-trial."""

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

from minimind.foundations.processes import is_alive
from minimind.spec import SweepConfig
from minimind.sweep.liveness import WORKER_ATTR
from minimind.sweep.storage import open_storage

LR = {"type": "float", "low": 1e-3, "high": 2e-2, "log": True}
SWEEP_TIMEOUT_S = 500


@pytest.fixture
def sweep_spec(write_spec):
    def write(storage: str, trials: int, **changes) -> Path:
        section = {
            "trials": trials,
            "storage": storage,
            "sampler": {"name": "random", "seed": 0},
            "pruner": "none",
            "params": {"train.optimizer.lr": LR},
            "heartbeat_interval": 1,  # many small writes from both workers: lock contention
            "grace_period": 60,
        }
        return write_spec(sweep=section, **changes)

    return write


def start_sweep(path: Path, cwd: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "minimind", "sweep", str(path), "--workers", "2", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # as from a terminal: a background job of a non-interactive shell would ignore SIGINT
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def start_long_sweep(sweep_spec, storage: str, tmp_path: Path) -> subprocess.Popen:  # noqa: ANN001
    """A 2-worker sweep whose trials train far longer than a test waits: to be interrupted."""
    train = {"steps": 100000, "eval_every": 1000, "log_every": 100, "sample_tokens": 0}
    return start_sweep(sweep_spec(storage, trials=20, train=train), tmp_path)


def running_workers(process: subprocess.Popen, storage: str) -> set[int]:
    """The pids of the workers seen training a trial of study `tiny` (both, or none on time)."""
    journal = open_storage(SweepConfig(storage=storage))
    workers: set[int] = set()
    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    while len(workers) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        if "tiny" not in optuna.get_all_study_names(journal):
            continue
        study = optuna.load_study(study_name="tiny", storage=journal)
        for trial in study.get_trials(states=(TrialState.RUNNING,)):
            record = trial.user_attrs.get(WORKER_ATTR)
            if record:
                workers.add(record["pid"])
    return workers


def mlflow_statuses(uri: str) -> dict[str, list[str]]:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tiny").experiment_id
    statuses: dict[str, list[str]] = {}
    for run in client.search_runs([experiment]):
        statuses.setdefault(run.info.run_name, []).append(run.info.status)
    return statuses


def test_two_workers_finish_the_study_on_sqlite_without_lock_errors(
    sweep_spec, tmp_path, mlflow_uri
):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    path = sweep_spec(storage, trials=4)
    process = start_sweep(path, tmp_path)
    output, _ = process.communicate(timeout=SWEEP_TIMEOUT_S)
    assert process.returncode == 0, output
    assert "database is locked" not in output and "Traceback" not in output, output
    # progress while the workers run (lines off a terminal), before the study's report
    watched = [line for line in output.splitlines() if line.startswith("study tiny: ")]
    assert any(" finished (" in line for line in watched[1:-1]), output
    study = optuna.load_study(study_name="tiny", storage=storage)
    states = [t.state for t in study.trials]
    assert states.count(TrialState.COMPLETE) in (4, 5), states  # 5: both took the last one
    assert set(states) == {TrialState.COMPLETE}
    pids = {t.user_attrs[WORKER_ATTR]["pid"] for t in study.trials}
    assert len(pids) == 2 and process.pid not in pids  # two worker processes shared the work
    statuses = mlflow_statuses(mlflow_uri)
    assert statuses.pop("tiny") == ["FINISHED"]
    assert statuses == {f"trial-{t.number}": ["FINISHED"] for t in study.trials}


@pytest.mark.slow
def test_a_sigkilled_worker_does_not_stop_the_other_and_its_trial_is_retried(
    sweep_spec, tmp_path, mlflow_uri
):
    storage = f"journal:{tmp_path}/optuna.log"
    train = {"steps": 60, "eval_every": 30, "log_every": 10, "sample_tokens": 0}
    path = sweep_spec(storage, trials=3, train=train)
    process = start_sweep(path, tmp_path)
    journal = open_storage(SweepConfig(storage=storage))
    victim = None
    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    while victim is None and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        if "tiny" not in optuna.get_all_study_names(journal):
            continue
        study = optuna.load_study(study_name="tiny", storage=journal)
        for trial in study.get_trials(states=(TrialState.RUNNING,)):
            record = trial.user_attrs.get(WORKER_ATTR)
            if record and record["trial"] == trial.number and record["runs"]:
                victim = trial.number, record["pid"], record["runs"][0]
                os.kill(record["pid"], signal.SIGKILL)
                break
    assert victim is not None, "no trial was seen running"
    output, _ = process.communicate(timeout=SWEEP_TIMEOUT_S)
    assert process.returncode == 0, output
    assert f"(pid {victim[1]}) died; starting worker 2 in its place" in output  # two to the end
    number, pid, run_id = victim
    trials = optuna.load_study(study_name="tiny", storage=journal).get_trials()
    assert trials[number].state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == number]
    assert [t.state for t in retries] == [TrialState.COMPLETE]
    assert retries[0].params == trials[number].params
    assert sum(t.state == TrialState.COMPLETE for t in trials) >= 3
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    killed = MlflowClient(mlflow_uri).get_run(run_id)
    assert killed.info.status == "FAILED"
    assert f":{pid} died" in killed.data.tags["failure_reason"]
    assert not [s for runs in mlflow_statuses(mlflow_uri).values() for s in runs if s == "RUNNING"]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_workers_stop_when_their_driver_is_sigkilled(sweep_spec, tmp_path, mlflow_uri):
    """SIGKILL of the driver leaves no handler to stop the workers: they notice that their parent
    is gone and stop, rather than train on unattended to the end of the study."""
    storage = f"journal:{tmp_path}/optuna.log"
    process = start_long_sweep(sweep_spec, storage, tmp_path)
    try:
        workers = running_workers(process, storage)
        assert len(workers) == 2, "the two workers were not seen training"
    finally:
        process.kill()
        process.wait()
        process.stdout.close()  # not communicate(): workers left alive hold the pipe open
    deadline = time.monotonic() + 60
    while any(is_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [pid for pid in workers if is_alive(pid)]
    for pid in left:  # do not leave them training after the test
        os.kill(pid, signal.SIGKILL)
    assert left == []


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_sigint_to_the_driver_alone_stops_the_workers_in_one_line(sweep_spec, tmp_path, mlflow_uri):
    """`kill -INT <driver pid>` (the workers do not get it: they have their own process group,
    as they do not from a terminal's Ctrl-C either): the driver passes it on, and the sweep ends
    130 with one line, its trials FAIL and their runs KILLED, no Optuna traceback."""
    storage = f"journal:{tmp_path}/optuna.log"
    process = start_long_sweep(sweep_spec, storage, tmp_path)
    try:
        workers = running_workers(process, storage)
        assert len(workers) == 2, "the two workers were not seen training"
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=SWEEP_TIMEOUT_S)
    finally:
        process.kill()
    assert process.returncode == 130, output
    assert output.rstrip().endswith("interrupted; run the same command to resume"), output
    assert "Traceback" not in output and "failed with" not in output, output
    assert [pid for pid in workers if is_alive(pid)] == []
    study = optuna.load_study(study_name="tiny", storage=open_storage(SweepConfig(storage=storage)))
    assert {t.state for t in study.trials} == {TrialState.FAIL}
    statuses = mlflow_statuses(mlflow_uri)
    assert "RUNNING" not in {status for runs in statuses.values() for status in runs}, statuses
