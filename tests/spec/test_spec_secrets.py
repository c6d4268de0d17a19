"""No password is recorded: a spec's URIs lose theirs in every copy of the spec that is stored
(`dump_spec`: the `spec.yaml` artifact of runs and trials, the spec file of Slurm jobs,
`best.yaml`; `flatten`: the MLflow params) and in a sweep worker's record in the study."""

from __future__ import annotations

import os

import optuna
import pytest
import yaml

from minimind.spec import dump_spec, flatten, load_spec
from minimind.sweep import plan_sweep
from minimind.sweep.best import write_best
from minimind.sweep.liveness import WORKER_ATTR, record_worker

TRACKING = "postgresql://lab:s3cr/et@db.example:5432/runs"
STORAGE = "postgresql+psycopg://lab@db.example/optuna?sslmode=require&password=hunter2"


@pytest.fixture
def secret_spec(write_spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = {
        "trials": 2,
        "storage": STORAGE,
        "params": {"train.optimizer.lr": {"type": "float", "low": 1e-3, "high": 1e-2}},
    }
    return write_spec(tracking={"uri": TRACKING}, sweep=sweep)


def test_stored_copies_of_a_spec_hold_no_password(secret_spec) -> None:
    spec = load_spec(secret_spec)
    assert spec.tracking.uri == TRACKING  # the process that connects keeps what it was given
    dumped = dump_spec(spec)
    assert "s3cr" not in dumped and "hunter2" not in dumped
    tree = yaml.safe_load(dumped)
    assert tree["tracking"]["uri"] == "postgresql://lab@db.example:5432/runs"
    assert tree["sweep"]["storage"] == "postgresql+psycopg://lab@db.example/optuna?sslmode=require"
    params = flatten(spec)
    assert params["tracking.uri"] == "postgresql://lab@db.example:5432/runs"
    assert not [v for v in params.values() if "s3cr" in str(v) or "hunter2" in str(v)]


def test_best_yaml_holds_no_password_and_replaces_a_planted_link(secret_spec, tmp_path) -> None:
    plan = plan_sweep(secret_spec)
    (cell,) = plan.cells
    best = optuna.trial.create_trial(
        params={"train.optimizer.lr": 0.005},
        distributions={"train.optimizer.lr": optuna.distributions.FloatDistribution(1e-3, 1e-2)},
        value=2.0,
    )
    reports, target = tmp_path / "reports", tmp_path / "elsewhere.yaml"
    (reports / plan.spec.name).mkdir(parents=True)
    target.write_text("untouched")
    os.symlink(target, reports / plan.spec.name / "best.yaml")
    path = write_best(plan, {cell.name: best}, reports)
    assert target.read_text() == "untouched" and not path.is_symlink()
    text = path.read_text()
    assert "s3cr" not in text and "hunter2" not in text
    assert load_spec(path).tracking.uri == "postgresql://lab@db.example:5432/runs"


def test_a_worker_record_in_the_study_holds_no_password() -> None:
    trial = optuna.create_study().ask()
    record_worker(trial, TRACKING, ["abc"])
    assert trial.study.trials[0].user_attrs[WORKER_ATTR]["tracking_uri"] == (
        "postgresql://lab@db.example:5432/runs"
    )
