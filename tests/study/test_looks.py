"""`minimind study train` after the streams: look after look, the next seeds of the open
comparisons only, never a finished (arm, seed) again, resumable, tuning seeds skipped."""

from __future__ import annotations

import itertools
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric

from minimind.study.analysis import StudyError, load_experiments
from minimind.study.looks import LookRuns, look_steps, missing_runs, spread, train_looks
from minimind.study.manifest import load_study
from minimind.study.planning import plan_study, sequential_decisions
from minimind.study.steps import RunStep
from minimind.study.streams import command_line

T0 = 1_700_000_000_000
OFFSET = {"base": 0.0, "good": -0.03, "same": 0.001, "near": 0.012}
NOISE = {"base": 0.0, "good": 0.006, "same": 0.003, "near": 0.012}


def value(variant: str, seed: int) -> float:
    """A seed's final val/bpb: the baseline's seed noise, shared by every arm, plus the arm's
    offset and its own noise."""
    shared, own = np.random.default_rng(seed).standard_normal(2)
    own = np.random.default_rng([seed, len(variant), ord(variant[0])]).standard_normal()
    return 2.5 + 0.02 * shared + OFFSET[variant] + NOISE[variant] * own


class FakeTrainer:
    """Logs a look's runs straight into the store, as `minimind run --variant ... --resume`
    would; `stop_after` looks, it is interrupted."""

    def __init__(self, uri: str, stop_after: int | None = None) -> None:
        self.client = MlflowClient(uri)
        self.exp = self.client.get_experiment_by_name("arms").experiment_id
        self.clock = itertools.count(T0 + 10_000_000, 1000)
        self.looks: list[list[LookRuns]] = []
        self.stop_after = stop_after

    def __call__(self, runs: list[LookRuns]) -> list:
        if self.stop_after is not None and len(self.looks) == self.stop_after:
            raise KeyboardInterrupt
        self.looks.append(runs)
        parent = log_parent(self.client, self.exp, "arms", next(self.clock))
        for look in runs:
            for variant in look.variants:
                for seed in look.seeds:
                    start = next(self.clock)
                    log_child(
                        self.client, self.exp, parent, variant, seed, start,
                        params={"train.steps": "10"},
                        metrics=[Metric("val/bpb", value(variant, seed), start, 10)],
                    )  # fmt: skip
        return []


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with the experiment `arms` and no runs (made once: creating a database takes
    most of a test's time)."""
    root = tmp_path_factory.mktemp("empty-store")
    MlflowClient(f"sqlite:///{root}/mlflow.db").create_experiment(
        "arms", artifact_location=str(root / "arms")
    )
    return root / "mlflow.db"


@pytest.fixture
def make_store(empty_store: Path):
    def make(root: Path, seeds: list[int]) -> str:
        shutil.copy(empty_store, root / "mlflow.db")
        return log_first_look(f"sqlite:///{root}/mlflow.db", seeds)

    return make


def log_first_look(uri: str, seeds: list[int]) -> str:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("arms").experiment_id
    parent = log_parent(client, exp, "arms", T0)
    clock = itertools.count(T0 + 1000, 1000)
    for variant in OFFSET:
        for seed in seeds:
            start = next(clock)
            log_child(
                client, exp, parent, variant, seed, start, params={"train.steps": "10"},
                metrics=[Metric("val/bpb", value(variant, seed), start, 10)],
            )  # fmt: skip
    return uri


def manifest(root: Path, **changes) -> Path:
    arms = {v: {"label": v, "experiment": "arms", "variant": v} for v in OFFSET}
    tree = {
        "name": "looks",
        "title": "Looks",
        "equivalence_margin": 0.02,
        "streams": [["minimind run a.yaml"], ["minimind run b.yaml"]],
        "arms": arms,
        "axes": [
            {
                "name": "axis",
                "title": "Axis",
                "expected": "good better, same equal, near equal",
                "references": ["Somebody 2020"],
                "comparisons": [
                    {"arm": "good", "against": "base", "expect": "better"},
                    {"arm": "same", "against": "base", "expect": "equal"},
                    {"arm": "near", "against": "base", "expect": "equal"},
                ],
            }
        ],
        **changes,
    }
    path = root / "study.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def trained(uri: str) -> Counter:
    """(variant, seed) -> how many runs of it the store holds."""
    runs = load_experiments(load_study_at(uri), uri)["arms"].runs
    return Counter(zip(runs["variant"], runs["seed"].astype(int), strict=True))


def load_study_at(uri: str):
    return load_study(Path(uri.removeprefix("sqlite:///")).parent / "study.yaml")


def standing(study, uri: str):
    return sequential_decisions(study, plan_study(study, uri))["axis"]


def test_looks_train_the_open_comparisons_seeds_until_each_stops(
    tmp_path: Path, make_store
) -> None:
    uri = make_store(tmp_path, [0, 1, 2])
    study = load_study(manifest(tmp_path))
    trainer = FakeTrainer(uri)
    assert train_looks(study, uri, tmp_path / "logs", trainer) == []
    outcome = standing(study, uri)
    assert "open" not in set(outcome.stop[0])
    assert len(trainer.looks) >= 2  # the design went past its second look
    counts = trained(uri)
    assert max(counts.values()) == 1  # no (arm, seed) trained twice
    looks = study.sequential.looks
    for j, arm in enumerate(["good", "same", "near"]):
        # an arm has exactly the seeds of the look its comparison stopped at
        stopped = looks[int(outcome.look[0, j])]
        assert {s for v, s in counts if v == arm} == set(range(stopped)), arm
    # the reference has what its longest-running comparison needed
    assert {s for v, s in counts if v == "base"} == set(range(max(outcome.seeds[0])))
    # the first look after the streams trains only the comparisons still open at look 1
    first = trainer.looks[0]
    assert all(set(r.seeds) == {3, 4, 5} for r in first)


@pytest.mark.slow
def test_a_stopped_study_run_again_continues_where_it_stopped(tmp_path: Path, make_store) -> None:
    straight_root, stopped_root = tmp_path / "straight", tmp_path / "stopped"
    results = []
    for root, stops in ((straight_root, []), (stopped_root, [1])):
        root.mkdir()
        uri = make_store(root, [0, 1, 2])
        study = load_study(manifest(root))
        for stop in stops:  # interrupted after `stop` looks, then run again
            with pytest.raises(KeyboardInterrupt):
                train_looks(study, uri, root / "logs", FakeTrainer(uri, stop_after=stop))
        assert train_looks(study, uri, root / "logs", FakeTrainer(uri)) == []
        results.append(trained(uri))
    assert results[0] == results[1]
    assert max(results[1].values()) == 1


def test_tuning_seeds_never_evaluate_an_arm(tmp_path: Path, make_store) -> None:
    uri = make_store(tmp_path, [0, 2, 3])
    study = load_study(manifest(tmp_path, tuning_seeds=[1, 100]))
    assert study.evaluation_seeds(4) == [0, 2, 3, 4]
    assert train_looks(study, uri, tmp_path / "logs", FakeTrainer(uri)) == []
    assert not {s for _, s in trained(uri)} & {1, 100}


def aa_study(root: Path, b_seeds: list[int]):
    """The manifest's baseline against itself: base A on seeds 0-2, base B on `b_seeds`."""
    path = manifest(root)
    tree = yaml.safe_load(path.read_text())
    tree["arms"]["base_a"] = {**tree["arms"]["base"], "label": "base A", "seeds": [0, 1, 2]}
    tree["arms"]["base_b"] = {**tree["arms"]["base"], "label": "base B", "seeds": b_seeds}
    tree["axes"] = [
        {**tree["axes"][0], "name": "aa", "comparisons": [
            {"arm": "base_b", "against": "base_a", "expect": "equal"}
        ]}
    ]  # fmt: skip
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return load_study(path)


def test_an_aa_arm_goes_only_as_far_as_its_listed_seeds(tmp_path: Path, make_store) -> None:
    uri = make_store(tmp_path, [0, 1, 2, 3, 4, 5])
    study = aa_study(tmp_path, [3, 4, 5])
    runs, notes = missing_runs(study, load_experiments(study, uri))
    # 3 pairs settle nothing at the first look (O'Brien-Fleming spends almost no error there)
    assert sequential_decisions(study, plan_study(study, uri))["aa"].stop[0, 0] == "open"
    assert runs == []
    assert notes == ["aa: base_b vs base_a cannot go on to 6 seeds: arms.base_b.seeds lists 3"]


def test_an_aa_arm_with_no_run_yet_gets_its_first_look_trained(tmp_path: Path, make_store) -> None:
    # the streams train seeds 0-2 of every variant; the A/A arm's own seeds are a look's to train
    uri = make_store(tmp_path, [0, 1, 2])
    study = aa_study(tmp_path, [10, 11, 12])
    runs, notes = missing_runs(study, load_experiments(study, uri))
    assert runs == [LookRuns("arms", ("base",), (10, 11, 12))]
    assert notes == []


def test_an_aa_arm_chosen_by_params_on_budget_branches_gets_its_first_look(
    tmp_path: Path, empty_store: Path
) -> None:
    # a tuned baseline (params, not a variant tag) whose spec has budget branches: its runs are
    # `budget=<steps>,<variant>`; the look trains the spec's own variant on the A/A seeds
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("arms").experiment_id
    parent = log_parent(client, exp, "arms", T0)
    clock = itertools.count(T0 + 1000, 1000)
    for name, norm in (("tuned=a", "rmsnorm"), ("tuned=b", "layernorm")):
        for budget, seed in itertools.product((5, 10), (0, 1, 2)):
            start = next(clock)
            log_child(
                client, exp, parent, f"budget={budget},{name}", seed, start,
                params={"train.steps": str(budget), "model.norm": norm},
                metrics=[Metric("val/bpb", value("base", seed), start, budget)],
                tags={"budget": str(budget), "arm": name},
            )  # fmt: skip
    tree = yaml.safe_load(manifest(tmp_path).read_text())
    base = {"experiment": "arms", "where": {"model.norm": "rmsnorm", "train.steps": 10}}
    tree["arms"] = {
        "base": {**base, "label": "base", "seeds": [0, 1, 2]},
        "base_b": {**base, "label": "base B", "seeds": [10, 11, 12]},
    }
    aa = {"arm": "base_b", "against": "base", "expect": "equal"}
    tree["axes"] = [{**tree["axes"][0], "comparisons": [aa]}]
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
    study = load_study(tmp_path / "study.yaml")
    runs, notes = missing_runs(study, load_experiments(study, uri))
    assert runs == [LookRuns("arms", ("tuned=a",), (10, 11, 12))]
    assert notes == []


def test_a_look_step_adds_seeds_and_variants_to_the_stream_step(tmp_path: Path, write_spec) -> None:
    spec = write_spec(ablate={"model.norm": ["rmsnorm", "layernorm"]})
    path = manifest(tmp_path, streams=[[f"minimind run {spec} -o train.steps=3 -o seeds=[0,1]"]])
    study = load_study(path)
    look = LookRuns("tiny", ("norm=layernorm",), (3, 4, 5))
    (step,) = look_steps(study, [look])
    # the stream step's spec and overrides, the look's seeds in place of the step's own
    assert (step.spec, step.overrides) == (str(spec), ("train.steps=3",))
    assert (step.variants, step.seeds) == (("norm=layernorm",), (3, 4, 5))
    assert command_line(step) == (
        f"minimind run {spec} -o train.steps=3 -o 'seeds=[3,4,5]' --variant norm=layernorm"
    )
    with pytest.raises(StudyError, match="no run step trains gelu of tiny"):
        look_steps(study, [LookRuns("tiny", ("gelu",), (3,))])


def test_a_look_of_an_experiment_two_specs_train_gets_a_step_per_spec(
    tmp_path: Path, write_spec
) -> None:
    norms = write_spec(ablate={"model.norm": ["rmsnorm", "layernorm"]})
    mlps = tmp_path / "mlps.yaml"
    tree = yaml.safe_load(norms.read_text())
    mlps.write_text(yaml.safe_dump({**tree, "ablate": {"model.mlp": ["swiglu", "gelu"]}}))
    path = manifest(tmp_path, streams=[[{"run": str(norms)}], [{"run": str(mlps)}]])
    look = LookRuns("tiny", ("norm=layernorm", "mlp=gelu"), (3,))
    assert look_steps(load_study(path), [look]) == [
        step(norms, ("norm=layernorm",), (3,)),
        step(mlps, ("mlp=gelu",), (3,)),
    ]


def step(spec: Path | str, variants: tuple[str, ...], seeds: tuple[int, ...]) -> RunStep:
    return RunStep.model_validate({"run": str(spec), "variants": variants, "seeds": seeds})


def test_a_look_never_runs_two_steps_of_one_spec_at_once() -> None:
    # an A/A row's two arms of one variant miss other seeds: two steps of a.yaml, which would
    # reopen one parent run side by side (a spec's hash leaves its seeds out)
    steps = [step("a.yaml", ("base",), (4,)), step("a.yaml", ("base",), (5,))]
    steps.append(step("b.yaml", ("x",), (3,)))
    assert spread(steps, 2) == [steps[:2], steps[2:]]
    assert spread(steps, 3) == [steps[:2], steps[2:], []]


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_study_train_runs_the_streams_then_the_looks_and_a_rerun_trains_nothing(
    write_spec, mlflow_uri, tmp_path, monkeypatch
) -> None:
    from minimind.cli import main

    spec = write_spec(ablate={"model.norm": ["rmsnorm", "layernorm"]}, seeds=[0, 1])
    path = manifest(
        tmp_path,
        streams=[[f"minimind run {spec}"]],
        arms={
            "base": {"label": "RMSNorm", "experiment": "tiny", "variant": "norm=rmsnorm"},
            "ln": {"label": "LayerNorm", "experiment": "tiny", "variant": "norm=layernorm"},
        },
        axes=[
            {
                "name": "axis",
                "title": "Norm",
                "expected": "equal",
                "references": ["Somebody 2020"],
                "comparisons": [{"arm": "ln", "against": "base", "expect": "equal"}],
            }
        ],
        equivalence_margin=1e-9,  # never settled by equivalence: it goes on to the cap
        sequential={"looks": [2, 3]},
    )
    monkeypatch.chdir(tmp_path)  # the stream logs go under results/generated/
    argv = ["study", "train", str(path), "--tracking-uri", mlflow_uri]
    assert main(argv) == 0
    study = load_study(path)
    runs = load_experiments(study, mlflow_uri)["tiny"].runs
    stopped = standing(study, mlflow_uri)
    assert stopped.stop[0, 0] in ("difference", "cap")
    seeds = set(range(int(stopped.seeds[0, 0])))
    for variant in ("norm=rmsnorm", "norm=layernorm"):
        assert sorted(runs.loc[runs["variant"] == variant, "seed"]) == sorted(seeds)
    report = ["study", "report", str(path), "--tracking-uri", mlflow_uri, "--report-dir", "r"]
    assert main(report) == 0 and (tmp_path / "r" / "index.html").exists()
    # run again: the stream's run resumes and skips, the looks find nothing to train
    assert main(argv) == 0
    again = load_experiments(study, mlflow_uri)["tiny"].runs
    assert len(again) == len(runs)


def test_a_look_balances_its_streams_by_runs_not_by_spec_count() -> None:
    # round-robin by spec would give stream 0 the 9 runs of a.yaml and c.yaml (6 + 3), stream 1
    # the 2 of b.yaml; by runs, the largest spec gets a stream to itself
    steps = [
        step("a.yaml", ("x", "y"), (3, 4, 5)),
        step("b.yaml", ("x",), (3, 4)),
        step("c.yaml", ("x",), (3, 4, 5)),
    ]
    assert spread(steps, 2) == [steps[:1], [steps[2], steps[1]]]


def test_a_look_step_counts_the_seeds_it_trains_not_the_stream_step_s(
    tmp_path: Path, write_spec
) -> None:
    # the stream step trains seeds 0-2; its look step trains 12-17 of the variant: 6 runs,
    # against the 3 of each other spec's look step
    spec = write_spec(name="six")
    path = manifest(tmp_path, streams=[[f"minimind run {spec} -o seeds=[0,1,2]"]])
    (six,) = look_steps(load_study(path), [LookRuns("six", ("base",), tuple(range(12, 18)))])
    three = [step(f"{name}.yaml", ("x",), (3, 4, 5)) for name in "bc"]
    assert spread([*three, six], 2) == [[six], three]
