"""Sweep building blocks without training: search space, reduce, pruning hook, samplers, storage,
dead-worker clean-up, study checks and up-front validation (exit code 2)."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from minimind.cli import main
from minimind.foundations.processes import is_alive
from minimind.spec import ParamSpec, ReduceConfig, SpecError, SweepConfig, spec_hash
from minimind.sweep import plan_sweep
from minimind.sweep.algorithms import (
    POINT_FAILED_ATTR,
    GridSampler,
    build_pruner,
    build_sampler,
    worker_seed,
)
from minimind.sweep.liveness import WORKER_ATTR, release_orphans
from minimind.sweep.objective import TrialSink, reduce_values, trial_values
from minimind.sweep.optuna_study import counted, open_study, progress
from minimind.sweep.space import grid_size, grid_space, grid_values, suggest
from minimind.sweep.storage import SQLITE_BUSY_TIMEOUT_S, open_storage
from minimind.sweep.worker import GIVE_UP_AFTER, run_trials

optuna.logging.set_verbosity(optuna.logging.WARNING)

PARAMS = {
    "train.optimizer.lr": ParamSpec(type="float", low=1e-4, high=1e-2, log=True),
    "model.dropout": ParamSpec(type="float", low=0.0, high=0.3, step=0.1),
    "train.schedule.warmup": ParamSpec(type="int", low=0, high=40, step=10),
    "train.batch_size": ParamSpec(type="int", low=1, high=64, log=True),
    "model.mlp": ParamSpec(type="categorical", choices=["relu", "swiglu"]),
}


def test_suggest_maps_every_type_onto_its_optuna_distribution() -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(30):
        trial = study.ask()
        values = suggest(trial, PARAMS)
        assert trial.distributions == {
            "train.optimizer.lr": FloatDistribution(1e-4, 1e-2, log=True),
            "model.dropout": FloatDistribution(0.0, 0.3, step=0.1),
            "train.schedule.warmup": IntDistribution(0, 40, step=10),
            "train.batch_size": IntDistribution(1, 64, log=True),
            "model.mlp": CategoricalDistribution(["relu", "swiglu"]),
        }
        assert values == trial.params
        assert 1e-4 <= values["train.optimizer.lr"] <= 1e-2
        assert values["train.schedule.warmup"] in (0, 10, 20, 30, 40)
        assert min(abs(values["model.dropout"] - k / 10) for k in range(4)) < 1e-9
        study.tell(trial, 0.0)


def test_grid_walks_each_range_by_its_step_and_the_grid_sampler_visits_every_point() -> None:
    assert grid_values(PARAMS["train.schedule.warmup"]) == [0, 10, 20, 30, 40]
    assert grid_values(PARAMS["model.dropout"]) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert grid_values(ParamSpec(type="int", low=1, high=3)) == [1, 2, 3]
    assert grid_values(PARAMS["model.mlp"]) == ["relu", "swiglu"]
    finite = {
        k: p for k, p in PARAMS.items() if k not in ("train.optimizer.lr", "train.batch_size")
    }
    assert grid_size(finite) == 4 * 5 * 2
    with pytest.raises(ValueError, match="step"):
        grid_values(PARAMS["train.optimizer.lr"])
    study = optuna.create_study(sampler=optuna.samplers.GridSampler(grid_space(finite), seed=0))
    study.optimize(lambda t: len(suggest(t, finite)), n_trials=100)
    points = {tuple(t.params[k] for k in finite) for t in study.trials}
    assert len(study.trials) == len(points) == 40  # every point once, then the sampler stops


@pytest.mark.parametrize(
    ("name", "k", "expected"),
    [("last", 3, 6.0), ("min", 3, 2.0), ("max", 3, 6.0), ("mean_last_k", 3, 4.0)],
)
def test_reduce(name: str, k: int, expected: float) -> None:
    assert reduce_values([5.0, 3.0, 4.0, 2.0, 6.0], ReduceConfig(name=name, k=k)) == expected
    assert reduce_values([1.0, 3.0], ReduceConfig(name="mean_last_k", k=5)) == 2.0


class Recorder:
    def __init__(self) -> None:
        self.points: list[tuple[dict, int]] = []

    def log_metrics(self, metrics, step) -> None:
        self.points.append((dict(metrics), step))

    def flush(self, timeout=None) -> bool:
        return True


def test_sink_forwards_every_point_and_reports_the_reduced_objective() -> None:
    sweep = SweepConfig(objective="val/bpb", reduce="min")
    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=4.0))
    run = Recorder()
    sink = TrialSink(run, sweep, study.ask())
    """The exact val/bpb is logged once, at the end: pruning watches its periodic estimate."""
    points = [({"train/loss": 9.0}, 3), ({"val/bpb_sampled": 3.0}, 6)]
    points.append(({"val/bpb_sampled": 3.5}, 12))
    points.append(({"val/bpb_sampled": 5.0, "val/bpb": 4.2}, 18))  # above the threshold, min is not
    for metrics, step in points:
        sink.log_metrics(metrics, step)
    assert run.points == points
    assert study.trials[0].intermediate_values == {6: 3.0, 12: 3.0, 18: 3.0}
    assert sink.values() == [4.2]  # the objective is the exact figure


def test_sink_raises_pruned_after_logging_when_the_pruner_says_so() -> None:
    sweep = SweepConfig(objective="val/bpb", reduce="last")
    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=4.0))
    run = Recorder()
    sink = TrialSink(run, sweep, study.ask())
    sink.log_metrics({"val/bpb_sampled": 3.9}, 6)
    with pytest.raises(optuna.TrialPruned, match="pruned at step 12 with val/bpb_sampled 4.1000"):
        sink.log_metrics({"val/bpb_sampled": 4.1}, 12)
    assert run.points[-1] == ({"val/bpb_sampled": 4.1}, 12)
    last = TrialSink(run, sweep, study.ask(), final_step=12)
    last.log_metrics({"val/bpb_sampled": 4.1}, 12)  # the budget is spent: reported, not pruned
    assert study.trials[1].intermediate_values == {12: 4.1}


def test_a_multi_objective_sink_names_a_metric_never_logged() -> None:
    multi = SweepConfig(
        objective=["val/bpb", {"metric": "perf/tokens_per_s", "direction": "maximize"}]
    )
    unwatched = TrialSink(Recorder(), multi)
    unwatched.log_metrics({"val/bpb": 2.0}, 6)
    with pytest.raises(ValueError, match="perf/tokens_per_s was never logged"):
        unwatched.values()


def test_the_worker_loop_stops_at_the_target_the_deadline_or_after_failures_in_a_row() -> None:
    study = optuna.create_study()
    assert run_trials(study, lambda t: t.suggest_float("x", 0, 1), 3, None, 0) == "done"
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3
    assert run_trials(study, lambda t: 1 / 0, 3, None, 0) == "done"  # reached: runs nothing
    assert run_trials(study, lambda t: 0.0, 9, time.time() - 1, 0) == "timeout"
    assert len(study.trials) == 3
    reason = run_trials(study, lambda t: float("nan"), 9, None, 0)
    assert reason == f"gave up after {GIVE_UP_AFTER} failed trials in a row"
    assert [t.state for t in study.trials[3:]] == [TrialState.FAIL] * GIVE_UP_AFTER


@pytest.mark.parametrize("seed", [1, 2, 3])  # with each, Optuna's sampler repeats another point
def test_a_grid_trains_an_interrupted_point_again_and_one_that_fails_of_itself_once(
    seed: int,
) -> None:
    # Optuna's own grid sampler counts an interrupted trial's point as visited, and once the grid
    # is exhausted short of the target repeats a random point, finished or not.
    points = [1, 2, 3, 4, 5, 6]
    study = optuna.create_study(sampler=GridSampler({"x": points}, seed=seed))
    tried: list[int] = []

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_categorical("x", points)
        tried.append(x)
        if x in (2, 5) and tried.count(x) == 1:
            raise RuntimeError("interrupted")  # the attempt's failure, not the point's
        if x == 3:  # diverges: the same values fail again
            trial.set_user_attr(POINT_FAILED_ATTR, True)
            return float("nan")
        return float(x)

    sampler = study.sampler
    assert isinstance(sampler, GridSampler)
    assert run_trials(study, objective, len(points), None, 0, sampler.answered) == "done"
    assert sorted(tried) == [1, 2, 2, 3, 4, 5, 5, 6]  # every point answered, none twice
    complete = sorted(t.params["x"] for t in study.trials if t.state == TrialState.COMPLETE)
    assert complete == [1, 2, 4, 5, 6]
    assert sampler.answered(study) == 6
    assert progress(study).finished == 5


def test_a_grid_grows_in_place_and_a_resumed_sweep_reads_its_points_by_their_values() -> None:
    """A resumed sweep seeds its sampler apart (`worker_seed`), which shuffles the grid's order
    otherwise: Optuna's sampler, reading earlier trials by their index in that order, repeats a
    point and skips another."""
    study = optuna.create_study(sampler=GridSampler({"x": [1, 2, 3]}, seed=0))
    tried: list[int] = []

    def objective(trial: optuna.Trial) -> float:
        tried.append(trial.suggest_categorical("x", [1, 2, 3, 4, 5]))
        return float(tried[-1])

    assert run_trials(study, objective, 3, None, 0, study.sampler.answered) == "done"
    for seed in (1, 2, 3):  # resumed: the same grid, and then one grown by a point past its edge
        study.sampler = GridSampler({"x": [1, 2, 3]}, seed=seed)
        assert run_trials(study, objective, 3, None, 0, study.sampler.answered) == "done"
    grown = GridSampler({"x": [1, 2, 3, 4, 5]}, seed=4)
    study.sampler = grown
    assert grown.answered(study) == 3
    assert run_trials(study, objective, 5, None, 0, grown.answered) == "done"
    assert sorted(tried) == [1, 2, 3, 4, 5]


def test_samplers_and_pruners_are_built_and_their_options_checked() -> None:
    kinds = {
        "tpe": optuna.samplers.TPESampler,
        "random": optuna.samplers.RandomSampler,
        "nsga2": optuna.samplers.NSGAIISampler,
        "grid": optuna.samplers.GridSampler,
        "bruteforce": optuna.samplers.BruteForceSampler,
        "cmaes": optuna.samplers.CmaEsSampler,
    }
    finite = {"model.mlp": {"type": "categorical", "choices": ["relu", "swiglu"]}}
    for name, kind in kinds.items():
        assert isinstance(build_sampler(SweepConfig(sampler=name, params=finite), 0), kind)
    sweep = SweepConfig(sampler={"name": "tpe", "options": {"n_startup_trials": 3}})
    assert build_sampler(sweep, 0)._n_startup_trials == 3
    with pytest.raises(SpecError, match=r"^sweep.sampler.options: tpe: .*bogus"):
        build_sampler(SweepConfig(sampler={"name": "tpe", "options": {"bogus": 1}}), 0)
    real_find_spec = importlib.util.find_spec
    with pytest.MonkeyPatch.context() as patch:  # as if the cmaes package were not installed
        patch.setattr(
            importlib.util,
            "find_spec",
            lambda name: None if name == "cmaes" else real_find_spec(name),
        )
        with pytest.raises(SpecError, match="^sweep.sampler: cmaes needs the 'cmaes' package"):
            build_sampler(SweepConfig(sampler="cmaes"), 0)
    pruners = {
        "median": optuna.pruners.MedianPruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
        "none": optuna.pruners.NopPruner,
    }
    for name, kind in pruners.items():
        assert isinstance(build_pruner(SweepConfig(pruner=name)), kind)
    with pytest.raises(SpecError, match="^sweep.pruner.options: median: "):
        build_pruner(SweepConfig(pruner={"name": "median", "options": {"nope": 1}}))


def test_worker_seeds_differ_between_workers_and_invocations() -> None:
    assert worker_seed(7, 0, 0) == 7  # a fresh study with one worker: the spec's seed
    assert worker_seed(None, 3, 5) is None
    seeds = {worker_seed(7, w, n) for w in range(3) for n in (0, 8)}
    assert len(seeds) == 6
    assert worker_seed(7, 1, 8) == 2861341665  # derived, so the same in every process and run


def test_storages_sqlite_waits_for_locks_and_has_heartbeats_journal_is_a_file(tmp_path) -> None:
    sweep = SweepConfig(storage=f"sqlite:///{tmp_path}/sub/optuna.db", heartbeat_interval=5)
    storage = open_storage(sweep)
    assert isinstance(storage, optuna.storages.RDBStorage)
    assert storage.engine_kwargs["connect_args"]["timeout"] == SQLITE_BUSY_TIMEOUT_S
    assert storage.get_heartbeat_interval() == 5 and storage.grace_period == 60
    assert (tmp_path / "sub" / "optuna.db").is_file()
    journal = open_storage(SweepConfig(storage=f"journal:{tmp_path}/j/optuna.log"))
    assert isinstance(journal, optuna.storages.journal.JournalStorage)
    optuna.create_study(storage=journal, study_name="s")
    assert (tmp_path / "j" / "optuna.log").stat().st_size > 0


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_is_alive_tells_running_exited_and_zombie_processes() -> None:
    assert is_alive(os.getpid())
    assert not is_alive(dead_pid())
    zombie = subprocess.Popen(["true"])
    stat = Path(f"/proc/{zombie.pid}/stat")
    if not stat.exists():
        pytest.skip("no procfs")
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":  # exited, not yet reaped
        time.sleep(0.01)
    assert not is_alive(zombie.pid)
    zombie.wait()


@pytest.fixture
def mlflow_run(mlflow_uri):
    client = MlflowClient(mlflow_uri)
    experiment = client.create_experiment("sweep-parts")
    return lambda: client.create_run(experiment).info.run_id


def record(trial, number: int, pid: int, uri: str, runs: list[str]) -> None:
    info = {"trial": number, "host": __import__("socket").gethostname(), "pid": pid}
    trial.set_user_attr(WORKER_ATTR, {**info, "tracking_uri": uri, "runs": runs})


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_trials_of_dead_local_workers_are_failed_their_runs_ended_and_retried(
    tmp_path, mlflow_uri, mlflow_run
) -> None:
    storage = open_storage(SweepConfig(storage=f"sqlite:///{tmp_path}/optuna.db", retries=1))
    study = optuna.create_study(storage=storage, study_name="s")
    dead, alive, inherited = (study.ask() for _ in range(3))
    for trial in (dead, alive, inherited):
        trial.suggest_float("x", 0.0, 1.0)
    run_id = mlflow_run()
    record(dead, dead.number, dead_pid(), mlflow_uri, [run_id])
    record(alive, alive.number, os.getpid(), mlflow_uri, [])
    record(inherited, 0, dead_pid(), mlflow_uri, [])  # a retried trial's copy: not its own record
    assert release_orphans(study, retries=1) == [dead.number]
    states = {t.number: t.state for t in study.trials}
    assert states == {
        0: TrialState.FAIL,
        1: TrialState.RUNNING,
        2: TrialState.RUNNING,
        3: TrialState.WAITING,
    }
    retry = study.trials[3]
    assert retry.params == study.trials[0].params and retry.system_attrs["failed_trial"] == 0
    run = MlflowClient(mlflow_uri).get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["state"] == "failed"
    assert "died" in run.data.tags["failure_reason"]
    assert release_orphans(study, retries=0, exited=(os.getpid(),)) == [alive.number]
    assert len(study.trials) == 4  # retries=0: nothing queued


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_a_trial_whose_heartbeat_stops_is_failed_and_retried(tmp_path, mlflow_uri, mlflow_run):
    sweep = SweepConfig(
        storage=f"sqlite:///{tmp_path}/optuna.db", heartbeat_interval=1, grace_period=2
    )
    study = optuna.create_study(storage=open_storage(sweep), study_name="s")
    trial = study.ask()
    trial.suggest_int("n", 1, 9)
    run_id = mlflow_run()
    # Another machine's worker: not a local process, so only the heartbeat can tell.
    trial.set_user_attr(
        WORKER_ATTR,
        {"trial": 0, "host": "elsewhere", "pid": 1, "tracking_uri": mlflow_uri, "runs": [run_id]},
    )
    study._storage.record_heartbeat(trial._trial_id)
    assert release_orphans(study, retries=1) == [] and study.trials[0].state == TrialState.RUNNING
    time.sleep(3.2)
    release_orphans(study, retries=1)
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.WAITING]
    assert study.trials[1].params == study.trials[0].params
    assert MlflowClient(mlflow_uri).get_run(run_id).info.status == "FAILED"


# Up-front validation ---------------------------------------------------------------------


@pytest.fixture
def sweep_file(write_spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default paths (results/...) would land here

    def write(**sweep) -> Path:
        section = {
            "trials": 2,
            "storage": f"sqlite:///{tmp_path}/optuna.db",
            "params": {"train.optimizer.lr": {"type": "float", "low": 1e-3, "high": 1e-2}},
            **sweep,
        }
        return write_spec(sweep=section)

    return write


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--workers", "0"], "sweep.workers: must be > 0, got 0 (from --workers)"),
        (["--trials", "-1"], "sweep.trials: must be > 0, got -1 (from --trials)"),
        (["-o", "sweep.workers=0"], "sweep.workers: must be > 0"),
        (["-o", "sweep.storage=nosuchdb://x/y"], "sweep.storage: not a database URL"),
        (["-o", "sweep.storage=mysql+nosuchdriver://u@h/db"], "sweep.storage: not a database"),
        (["-o", "sweep.storage='sqlite:///:memory:'"], "sweep.storage: an in-memory SQLite"),
        (["-o", "sweep.storage=optuna.db"], "sweep.storage: must be journal:PATH or a database"),
        (["-o", "sweep.storage=postgresql://u@127.0.0.1:9/db"], "sweep.storage: cannot open"),
        (  # the password masked
            ["-o", "sweep.storage=postgresql://u:hunter2@127.0.0.1:9/db"],
            "sweep.storage: cannot open postgresql://u:***@127.0.0.1:9/db",
        ),
        (["-o", "sweep.seeds_per_trial=2"], "sweep.seeds_per_trial: must be <= the number of"),
        (["-o", "sweep.grace_period=5"], "sweep.grace_period: must be > heartbeat_interval"),
        (["-o", "sweep.sampler.options={bogus: 1}"], "sweep.sampler.options: tpe:"),
        (["-o", "sweep.params={}"], "sweep.params: no search dimensions"),
        (["-o", "sweep=null"], "sweep: missing"),
        (["--best"], "sweep.storage: "),  # before any sweep: no optuna.db created
        (["--best", "-o", "sweep.storage=journal:j.log"], "sweep.storage: j.log does not exist"),
    ],
)
def test_bad_input_exits_2_naming_the_field_and_writes_nothing(
    sweep_file, tmp_path, capsys, args, error
) -> None:
    path = sweep_file()
    before = sorted(tmp_path.rglob("*"))
    assert main(["sweep", str(path), *args]) == 2
    assert f"error: {error}" in capsys.readouterr().err
    assert sorted(tmp_path.rglob("*")) == before


def test_a_study_is_resumed_only_by_the_spec_that_made_it(sweep_file, capsys) -> None:
    path = sweep_file()
    plan = plan_sweep(path)
    storage = open_storage(plan.sweep)
    (cell,) = plan.cells
    study = open_study(storage, cell.name, cell.sweep, cell.cell_hash)
    assert study.user_attrs["cell_hash"] == cell.cell_hash == spec_hash(cell.spec)
    reopened = open_study(storage, cell.name, cell.sweep, cell.cell_hash)
    assert reopened.study_name == "tiny"  # the same spec reopens it
    assert main(["sweep", str(path), "-o", "train.steps=6"]) == 2
    assert "error: name: study 'tiny' in sqlite" in capsys.readouterr().err
    other = ["-o", "sweep.objective=val/loss"]
    assert main(["sweep", str(path), *other]) == 2
    err = capsys.readouterr().err
    assert "error: sweep.objective: study 'tiny'" in err and "optimizes minimize val/bpb" in err
    # `--trials` and `--workers` are not part of the spec hash: topping up is allowed.
    assert plan_sweep(path, trials=9, workers=2).cells[0].cell_hash == cell.cell_hash


def test_best_without_the_sweep_s_overrides_says_to_repeat_them(sweep_file, capsys) -> None:
    path = sweep_file()
    plan = plan_sweep(path, overrides=["train.steps=6"])
    (cell,) = plan.cells
    open_study(open_storage(plan.sweep), cell.name, cell.sweep, cell.cell_hash)
    assert main(["sweep", str(path), "--best"]) == 2
    err = capsys.readouterr().err
    assert "repeat the -o overrides the sweep ran with" in err and "new study" not in err


def test_a_study_stores_its_cell_hash_by_name_and_reads_the_legacy_one() -> None:
    storage = optuna.storages.InMemoryStorage()
    sweep = SweepConfig(objective="val/bpb")
    study = open_study(storage, "new", sweep, "c0ffee")
    assert study.user_attrs["cell_hash"] == "c0ffee" and "spec_hash" not in study.user_attrs
    # A study of an earlier version: the cell's hash under `spec_hash`.
    legacy = optuna.create_study(storage=storage, study_name="old")
    legacy.set_user_attr("spec_hash", "abc123")
    legacy.set_user_attr("objective", ["val/bpb"])
    assert open_study(storage, "old", sweep, "abc123").study_name == "old"
    with pytest.raises(SpecError, match=r"trains differently \(cell_hash abc123, this one ff"):
        open_study(storage, "old", sweep, "ffffff")


def test_a_grid_of_a_range_grows_in_place_and_changed_choices_are_refused_up_front() -> None:
    """Optuna's storage refuses a trial whose categorical choices differ from the study's earlier
    trials' (every trial would fail); a range's ends may change."""
    storage = optuna.storages.InMemoryStorage()

    def sweep(**param: object) -> SweepConfig:
        return SweepConfig(objective="val/bpb", sampler={"name": "grid"}, params={"x": param})

    def train(study: optuna.Study, config: SweepConfig, seed: int, target: int) -> None:
        study.sampler = build_sampler(config, seed)  # a resumed sweep seeds its sampler apart
        objective = functools.partial(lambda t, c: float(suggest(t, c.params)["x"]), c=config)
        count = functools.partial(counted, sweep=config)
        assert run_trials(study, objective, target, None, 0, count) == "done"

    first, grown = sweep(type="int", low=1, high=2), sweep(type="int", low=1, high=3)
    train(open_study(storage, "range", first, "c0ffee"), first, 0, 2)
    study = open_study(storage, "range", grown, "c0ffee")
    train(study, grown, 1, 3)
    assert sorted(t.params["x"] for t in study.trials) == [1, 2, 3]
    first = sweep(type="categorical", choices=[1, 2])
    train(open_study(storage, "choices", first, "c0ffee"), first, 0, 2)
    with pytest.raises(SpecError, match=r"sweep.params.x: .*tried the choices \[1, 2\]; Optuna"):
        open_study(storage, "choices", sweep(type="categorical", choices=[1, 2, 3]), "c0ffee")


def test_optuna_prints_no_info_lines_unless_verbose(sweep_file, capfd, monkeypatch) -> None:
    """The README's promise: other libraries' informational lines are hidden without -v."""
    monkeypatch.delenv("MINIMIND_VERBOSE", raising=False)
    path = sweep_file()
    plan = plan_sweep(path)
    (cell,) = plan.cells
    open_study(open_storage(plan.sweep), cell.name, cell.sweep, cell.cell_hash)
    optuna.logging.set_verbosity(optuna.logging.INFO)  # what a fresh process starts with
    try:
        capfd.readouterr()
        assert main(["sweep", str(path), "--best"]) == 1  # the study has no trial yet
        assert optuna.logging.get_verbosity() == optuna.logging.WARNING
        optuna.create_study(storage=open_storage(plan.sweep), study_name="another")
        assert "[I " not in capfd.readouterr().err
    finally:
        optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_a_trial_is_worth_the_median_of_its_seeds() -> None:
    # one tuning seed stalled: the mean (2.93) would rank the point below a steadier one
    assert trial_values([[2.40, 10.0], [2.50, 20.0], [3.90, 30.0]]) == [2.50, 20.0]
    assert trial_values([[2.40], [2.50]]) == [pytest.approx(2.45)]
