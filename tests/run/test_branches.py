"""Budget branches end to end: one run per budget, tagged, each equal to the plain wsd run of
its steps; `--resume` trains a missing branch from the trunk's fork; the dry run states the
compute saved."""

from __future__ import annotations

import pytest
from fake_runs import children
from mlflow.tracking import MlflowClient

from minimind.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

SCHEDULE = {"name": "wsd", "warmup": 2, "decay_fraction": 0.34}


def test_branches_are_tagged_runs_equal_to_plain_runs_and_resume_from_their_fork(
    write_spec, mlflow_uri, capsys
):
    branched = write_spec(train={"steps": 12, "schedule": {**SCHEDULE, "branches": [6, 9]}})
    assert main(["run", str(branched)]) == 0
    runs = children(mlflow_uri, "tiny")
    assert set(runs) == {f"budget={b},base/seed0" for b in (6, 9, 12)}
    for budget in (6, 9, 12):
        run = runs[f"budget={budget},base/seed0"]
        assert run.info.status == "FINISHED"
        assert run.data.tags["budget"] == str(budget) and run.data.tags["arm"] == "base"
        assert run.data.params["train.steps"] == str(budget)

    # each branch is the plain wsd run of its steps, bit for bit
    for budget in (6, 9):
        plain = write_spec(name=f"plain{budget}", train={"steps": budget, "schedule": SCHEDULE})
        assert main(["run", str(plain)]) == 0
        (run,) = children(mlflow_uri, f"plain{budget}").values()
        branch = runs[f"budget={budget},base/seed0"]
        assert branch.data.metrics["val/bpb"] == run.data.metrics["val/bpb"]
        assert branch.data.metrics["train/loss"] == run.data.metrics["train/loss"]

    # a branch lost since: --resume skips the finished runs and trains it from its fork
    MlflowClient(mlflow_uri).delete_run(runs["budget=6,base/seed0"].info.run_id)
    capsys.readouterr()
    assert main(["run", str(branched), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "budget=12,base/seed0: already FINISHED, skipped" in out
    assert "budget=9,base/seed0: already FINISHED, skipped" in out
    again = children(mlflow_uri, "tiny")["budget=6,base/seed0"]
    assert again.data.metrics["val/bpb"] == runs["budget=6,base/seed0"].data.metrics["val/bpb"]


def test_the_dry_run_states_the_forks_and_the_compute_saved(write_spec, capsys):
    path = write_spec(
        seeds=[0, 1], train={"steps": 12, "schedule": {**SCHEDULE, "branches": [6, 9]}}
    )
    assert main(["run", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    # forks at 6 - round(0.34 * 6) = 4 and 9 - round(0.34 * 9) = 6: 12 + 2 + 3 = 17 steps of 27
    assert (
        "budget branches: 6, 9, 12 steps, one wsd run to 12 forking 6 at step 4, 9 at step 6" in out
    )
    assert "17 steps per variant x seed instead of 27 as separate runs: 10 saved (37%)" in out
    assert f"{10 * 2 * 128:,} tokens over 2 run(s)" in out


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (
            {"name": "cosine", "warmup": 2, "branches": [6]},
            "train.schedule.branches: need schedule name wsd",
        ),
        (
            {"name": "wsd", "warmup": None, "branches": [6]},
            "train.schedule.warmup: budget branches share one warm-up",
        ),
        (
            {"name": "wsd", "warmup": 2, "branches": [14]},
            "train.schedule.branches: every budget must lie",
        ),
        (
            {"name": "wsd", "warmup": 2, "branches": [6, 6]},
            "train.schedule.branches: budgets must be distinct",
        ),
    ],
)
def test_branches_a_spec_cannot_train_are_one_line_errors(write_spec, capsys, schedule, message):
    path = write_spec(train={"steps": 12, "schedule": schedule})
    assert main(["run", str(path), "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_slurm_jobs_refuse_budget_branches_in_one_line(write_spec, capsys):
    path = write_spec(train={"steps": 12, "schedule": {**SCHEDULE, "branches": [6]}})
    assert main(["run", str(path), "--launcher", "slurm", "--dry-run"]) == 2
    assert (
        "train.schedule.branches: budget branches train on this host only"
        in capsys.readouterr().err
    )


def test_two_jobs_train_every_budget_with_the_serial_runs_numbers(write_spec, mlflow_uri, capsys):
    """A job trains a variant × seed's trunk and then its branches, as the serial loop does."""
    spec = write_spec(
        seeds=[0, 1], train={"steps": 12, "schedule": {**SCHEDULE, "branches": [6, 9]}}
    )
    assert main(["run", str(spec), "-o", "tracking.experiment=serial"]) == 0
    jobs = ["--jobs", "2", "-o", "launcher.threads_per_job=1", "-o", "tracking.experiment=jobs"]
    assert main(["run", str(spec), *jobs]) == 0
    assert "training 6 run(s) in 2 jobs" in capsys.readouterr().out
    serial, parallel = children(mlflow_uri, "serial"), children(mlflow_uri, "jobs")
    assert sorted(parallel) == sorted(serial) and len(serial) == 6  # 3 budgets x 2 seeds
    for name, run in parallel.items():
        assert run.info.status == "FINISHED"
        assert run.data.tags["budget"] == serial[name].data.tags["budget"]
        assert run.data.metrics == serial[name].data.metrics | {
            k: v for k, v in run.data.metrics.items() if k.startswith(("perf/", "time/", "sys/"))
        }, name
    assert main(["run", str(spec), *jobs, "--resume"]) == 0
    out = capsys.readouterr().out
    assert out.count("already FINISHED, skipped") == 6 and "training 0 run(s)" in out
