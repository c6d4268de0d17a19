"""`minimind sweep --launcher slurm` on a real single-node Slurm (tests/slurm_cluster.py): two
worker jobs share one study in PostgreSQL (tests/pg_server.py) and run its trials once."""

from __future__ import annotations

import os
import subprocess
import sys

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from pg_server import postgres_url  # noqa: F401  (fixture)
from slurm_cluster import slurm_cluster  # noqa: F401  (fixture)

from minimind.spec import SweepConfig
from minimind.sweep.liveness import WORKER_ATTR
from minimind.sweep.storage import open_storage

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]
TRIALS = 4
WORKERS = 2
TIMEOUT_S = 600


def test_two_worker_jobs_run_a_postgres_studys_trials_once(
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
    }
    train = {"steps": 60, "eval_every": 30, "log_every": 10, "sample_tokens": 0}
    path = write_spec(sweep=sweep, train=train)
    command = [sys.executable, "-m", "minimind", "sweep", str(path), "--launcher", "slurm"]
    command += ["--workers", str(WORKERS), "-o", f"launcher.folder={tmp_path / 'slurm'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("submitted as job") == WORKERS

    trials = optuna.load_study(
        study_name="tiny", storage=open_storage(SweepConfig(storage=postgres_url))
    ).get_trials()
    states = [t.state for t in trials]
    assert states.count(TrialState.COMPLETE) >= TRIALS
    assert set(states) == {TrialState.COMPLETE}  # none failed, none left running
    # Which jobs took part depends on when each started: the second may find the target reached.
    workers = {t.user_attrs[WORKER_ATTR]["pid"] for t in trials}
    assert 1 <= len(workers) <= WORKERS
    # Each trial trained once: one child run per trial, each FINISHED.
    client = MlflowClient(mlflow_uri)
    experiment = client.get_experiment_by_name("tiny")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], "tags.`minimind.role` = 'child'")
    names = sorted(run.info.run_name for run in runs)
    assert names == sorted(f"trial-{t.number}" for t in trials)
    assert {run.info.status for run in runs} == {"FINISHED"}
    print(f"{len(trials)} trials for a target of {TRIALS}, by {len(workers)} of {WORKERS} jobs")
