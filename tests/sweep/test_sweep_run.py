"""`minimind sweep` end to end, one worker in this process: studies, MLflow layout and statuses,
resume, pruning, failures, Ctrl-C, multi-objective, ablation cells, seeds and best.yaml."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from minimind.cli import main
from minimind.foundations.paths import REPORTS_DIR
from minimind.spec import load_spec
from minimind.sweep import run_sweep
from minimind.sweep.objective import TrialSink
from minimind.training.device import resolve_device

pytestmark = pytest.mark.usefixtures("one_thread")

LR = {"type": "float", "low": 1e-3, "high": 2e-2, "log": True}


@pytest.fixture
def sweep_spec(write_spec, tmp_path, monkeypatch):
    """`sweep_spec(sweep_changes, **spec_changes)`: a tiny spec with a random-sampler lr sweep."""
    monkeypatch.chdir(tmp_path)  # results/generated/... lands here

    def write(sweep: dict | None = None, **changes) -> Path:
        section = {
            "trials": 2,
            "storage": storage_url(tmp_path),
            "sampler": {"name": "random", "seed": 0},
            "pruner": "none",
            "params": {"train.optimizer.lr": LR},
            **(sweep or {}),
        }
        return write_spec(sweep=section, **changes)

    return write


def storage_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/optuna.db"


def load(tmp_path: Path, name: str = "tiny") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=storage_url(tmp_path))


def runs(uri: str, experiment: str = "tiny") -> dict[str, list]:
    """Runs by name, newest first."""
    client = MlflowClient(uri)
    found: dict[str, list] = {}
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    for run in client.search_runs([experiment_id], order_by=["attributes.start_time DESC"]):
        found.setdefault(run.info.run_name, []).append(run)
    return found


def history(uri: str, run_id: str, key: str) -> list[float]:
    points = MlflowClient(uri).get_metric_history(run_id, key)
    return [p.value for p in sorted(points, key=lambda p: p.step)]


def test_a_sweep_logs_a_parent_and_child_per_trial_and_a_rerun_tops_it_up(
    sweep_spec, tmp_path, mlflow_uri, capsys
):
    path = sweep_spec()
    assert run_sweep(path) == 0
    study = load(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    by_name = runs(mlflow_uri)
    (parent,) = by_name["tiny"]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["minimind.role"] == "parent" and parent.data.tags["study"] == "tiny"
    assert study.user_attrs["mlflow_parent_run_id"] == parent.info.run_id
    for trial in study.trials:
        (child,) = by_name[f"trial-{trial.number}"]
        tags = child.data.tags
        assert child.info.status == "FINISHED"
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert (tags["trial_number"], tags["study"], tags["state"]) == (
            str(trial.number),
            "tiny",
            "complete",
        )
        assert (tags["variant"], tags["seed"]) == ("base", "0")
        assert tags["device"] == resolve_device("auto").type  # the spec's train.device
        assert float(child.data.params["train.optimizer.lr"]) == trial.params["train.optimizer.lr"]
        # reduce: last -> the value is the run's final val/bpb
        assert trial.value == history(mlflow_uri, child.info.run_id, "val/bpb")[-1]
        assert child.data.metrics["trial/val/bpb"] == trial.value
        # trained by the path `minimind run` takes: the same artifacts as its children
        artifacts = {a.path for a in MlflowClient(mlflow_uri).list_artifacts(child.info.run_id)}
        assert {"spec.yaml", "model_summary.txt", "loss.png"} <= artifacts
    assert parent.data.metrics["best/val/bpb"] == min(t.value for t in study.trials)
    assert parent.data.tags["best_trial"] == str(study.best_trial.number)
    reports = tmp_path / REPORTS_DIR / "tiny"
    for name in ("trials.csv", "summary.json", "history.png", "parallel_coordinate.png"):
        assert (reports / name).stat().st_size > 0, name
    summary = json.loads((reports / "summary.json").read_text())
    assert summary["best"]["trial"] == study.best_trial.number
    assert summary["trials"] == {"finished": 2, "complete": 2, "pruned": 0, "failed": 0}
    artifacts = {
        a.path for a in MlflowClient(mlflow_uri).list_artifacts(parent.info.run_id, "summary")
    }
    assert {"summary/summary.json", "summary/history.png"} <= artifacts

    assert main(["sweep", str(path), "--trials", "3"]) == 0  # tops up by one, same parent
    study = load(tmp_path)
    assert len(study.trials) == 3 and study.trials[2].state == TrialState.COMPLETE
    by_name = runs(mlflow_uri)
    assert len(by_name["tiny"]) == 1 and by_name["tiny"][0].info.status == "FINISHED"
    assert sorted(n for n in by_name if n.startswith("trial-")) == ["trial-0", "trial-1", "trial-2"]
    best_steps = MlflowClient(mlflow_uri).get_metric_history(parent.info.run_id, "best/val/bpb")
    assert sorted(p.step for p in best_steps) == [2, 3]
    capsys.readouterr()

    assert main(["sweep", str(path), "--best"]) == 0
    out = capsys.readouterr().out
    best = study.best_trial
    assert f"best trial {best.number}: val/bpb {best.value:.4f}" in out
    assert "note: the sweep chose its values on seeds [0], which best.yaml runs too" in out
    best_yaml = reports / "best.yaml"
    spec = load_spec(best_yaml)
    assert spec.name == "tiny-best" and spec.sweep is None
    assert spec.train.optimizer.lr == best.params["train.optimizer.lr"]
    assert main(["run", str(best_yaml), "--dry-run"]) == 0


def enqueue(tmp_path: Path, lrs: list[float]) -> None:
    enqueue_params(tmp_path, [{"train.optimizer.lr": lr} for lr in lrs])


def enqueue_params(tmp_path: Path, trials: list[dict]) -> None:
    """Queue trials with these params in the study the sweep will open, so their order is known."""
    study = optuna.create_study(study_name="tiny", storage=storage_url(tmp_path))
    for params in trials:
        study.enqueue_trial(params)


def test_the_median_pruner_stops_a_trial_that_does_not_learn(sweep_spec, tmp_path, mlflow_uri):
    pruner = {"name": "median", "options": {"n_startup_trials": 2, "n_warmup_steps": 0}}
    params = {"train.optimizer.lr": {"type": "categorical", "choices": [1e-2, 1e-7]}}
    path = sweep_spec({"trials": 3, "pruner": pruner, "params": params})
    enqueue(tmp_path, [1e-2, 1e-2, 1e-7])  # two that learn, then one that cannot
    assert run_sweep(path) == 0
    study = load(tmp_path)
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    pruned = study.trials[2]
    assert list(pruned.intermediate_values) == [6]  # stopped at the first evaluation of 12 steps
    (run,) = runs(mlflow_uri)["trial-2"]
    assert run.info.status == "KILLED" and run.data.tags["state"] == "pruned"
    assert run.data.tags["failure_reason"].startswith("pruned at step 6 with val/bpb")
    assert history(mlflow_uri, run.info.run_id, "val/bpb_sampled") == [
        pruned.intermediate_values[6]
    ]
    assert history(mlflow_uri, run.info.run_id, "val/bpb") == []  # no exact figure: pruned
    good = study.trials[0].intermediate_values[6]
    assert pruned.intermediate_values[6] > good


def test_a_failed_trial_is_fail_and_failed_and_the_sweep_goes_on(sweep_spec, tmp_path, mlflow_uri):
    params = {"train.optimizer.lr": {"type": "categorical", "choices": [1e30, 1e-2]}}
    path = sweep_spec({"trials": 1, "params": params})
    enqueue(tmp_path, [1e30, 1e-2])  # the first diverges to a non-finite loss
    assert run_sweep(path) == 0  # a failed trial does not count: one more runs
    study = load(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert "non-finite " in study.trials[0].user_attrs["failure_reason"]
    by_name = runs(mlflow_uri)
    failed = by_name["trial-0"][0]
    assert failed.info.status == "FAILED" and failed.data.tags["state"] == "failed"
    assert "non-finite " in failed.data.tags["failure_reason"]
    assert by_name["trial-1"][0].info.status == "FINISHED"
    assert by_name["tiny"][0].info.status == "FINISHED"


def test_ctrl_c_leaves_nothing_running_and_a_rerun_resumes(
    sweep_spec, tmp_path, mlflow_uri, monkeypatch
):
    path = sweep_spec({"trials": 1})
    forward = TrialSink.log_metrics

    def interrupted(self, metrics, step):
        forward(self, metrics, step)
        if step == 6:
            raise KeyboardInterrupt

    monkeypatch.setattr(TrialSink, "log_metrics", interrupted)
    assert run_sweep(path) == 130
    study = load(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.FAIL]
    statuses = {name: [r.info.status for r in rs] for name, rs in runs(mlflow_uri).items()}
    assert statuses == {"tiny": ["KILLED"], "trial-0": ["KILLED"]}
    monkeypatch.setattr(TrialSink, "log_metrics", forward)
    assert run_sweep(path) == 0
    assert [t.state for t in load(tmp_path).trials] == [TrialState.FAIL, TrialState.COMPLETE]
    statuses = {name: [r.info.status for r in rs] for name, rs in runs(mlflow_uri).items()}
    assert statuses == {"tiny": ["FINISHED"], "trial-0": ["KILLED"], "trial-1": ["FINISHED"]}


def test_a_multi_objective_study_has_a_pareto_front(sweep_spec, tmp_path, mlflow_uri, capsys):
    objective = [
        {"metric": "val/bpb", "direction": "minimize"},
        {"metric": "perf/tokens_per_s", "direction": "maximize"},
    ]
    reduce = {"name": "mean_last_k", "k": 3}
    path = sweep_spec({"objective": objective, "reduce": reduce, "sampler": "nsga2"})
    assert run_sweep(path) == 0
    study = load(tmp_path)
    assert [d.name for d in study.directions] == ["MINIMIZE", "MAXIMIZE"]
    by_name = runs(mlflow_uri)
    for trial in study.trials:
        assert trial.state == TrialState.COMPLETE and len(trial.values) == 2
        run_id = by_name[f"trial-{trial.number}"][0].info.run_id
        bpb, speed = (history(mlflow_uri, run_id, m) for m in ("val/bpb", "perf/tokens_per_s"))
        assert trial.values == pytest.approx(
            [statistics.fmean(bpb[-3:]), statistics.fmean(speed[-3:])]
        )
    reports = tmp_path / REPORTS_DIR / "tiny"
    for name in ("pareto_front.png", "history-val_bpb.png", "history-perf_tokens_per_s.png"):
        assert (reports / name).is_file(), name
    assert (
        "Pareto front (minimize val/bpb vs maximize perf/tokens_per_s)" in capsys.readouterr().out
    )
    assert (reports / "best.yaml").is_file()


def test_each_ablation_cell_is_a_study_and_best_yaml_pairs_their_tuned_values(
    sweep_spec, tmp_path, mlflow_uri
):
    path = sweep_spec(
        {"trials": 1, "seeds_per_trial": 2},
        seeds=[0, 1],
        ablate={"model.norm": ["layernorm", "rmsnorm"]},
    )
    assert run_sweep(path) == 0
    by_name = runs(mlflow_uri)
    best = {}
    for norm in ("layernorm", "rmsnorm"):
        name = f"tiny/norm={norm}"
        (trial,) = load(tmp_path, name).trials
        best[norm] = trial.params["train.optimizer.lr"]
        (parent,) = by_name[name]
        assert parent.data.tags["variant"] == f"norm={norm}"
        children = [
            r
            for seed in (0, 1)
            for r in by_name[f"trial-0/seed{seed}"]
            if r.data.tags["mlflow.parentRunId"] == parent.info.run_id
        ]
        assert [c.data.tags["seed"] for c in children] == ["0", "1"]
        assert all(c.data.tags["component.norm"] == norm for c in children)
        per_seed = [c.data.metrics["trial/val/bpb"] for c in children]
        assert trial.value == pytest.approx(statistics.median(per_seed))  # over seeds
        assert (tmp_path / REPORTS_DIR / "tiny" / f"norm={norm}" / "summary.json").is_file()
    best_yaml = tmp_path / REPORTS_DIR / "tiny" / "best.yaml"
    spec = load_spec(best_yaml)
    assert spec.ablate == {
        "tuned": [{"model.norm": norm, "train.optimizer.lr": lr} for norm, lr in best.items()]
    }
    assert main(["run", str(best_yaml), "--dry-run"]) == 0


def test_a_searched_data_field_trains_on_its_own_prepared_data(
    sweep_spec, tmp_path, mlflow_uri, monkeypatch
):
    import minimind.sweep.objective as objective

    prepared = []
    prepare = objective.prepare_data
    monkeypatch.setattr(objective, "prepare_data", lambda cfg: prepared.append(cfg) or prepare(cfg))
    params = {"data.tokenizer.vocab_size": {"type": "categorical", "choices": [288, 320]}}
    path = sweep_spec({"trials": 1, "params": params})
    enqueue_params(tmp_path, [{"data.tokenizer.vocab_size": 288}])
    assert run_sweep(path) == 0
    assert [cfg.tokenizer.vocab_size for cfg in prepared] == [288]
    (run,) = runs(mlflow_uri)["trial-0"]
    assert run.data.params["data.tokenizer.vocab_size"] == "288"
