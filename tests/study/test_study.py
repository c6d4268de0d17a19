"""`minimind study`: the manifest, the per-axis families, the agreement with the literature,
the report re-rendered from a small fixture of runs, the training streams, and the shipped
study's specs and arms."""

from __future__ import annotations

import copy
import io
import math
import shutil
from html import escape as html_escape
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric
from scipy import stats

from minimind.cli import main
from minimind.compare import load_runs
from minimind.spec import SpecError, expand, flatten, load_spec
from minimind.spec.loader import read_yaml_mapping
from minimind.stats.power import detectable_difference, plan_seeds
from minimind.study.analysis import agreement, analyse
from minimind.study.domain_table import out_of_distribution
from minimind.study.manifest import Sensitivity, load_study
from minimind.study.report import sensitivity_figure
from minimind.study.streams import command_line, train
from minimind.study.tuning_figure import tuning_figures

T0 = 1_700_000_000_000
STEPS, BATCH, SEQ, FLOPS_PER_TOKEN = 10, 4, 8, 1000.0
BASE = np.array([2.50, 2.52, 2.54])
FINAL = {  # final val/bpb of seeds 0, 1, 2
    "base": BASE,
    "good": BASE - [0.10, 0.11, 0.12],
    "bad": BASE + [0.10, 0.12, 0.11],
    "noisy": BASE + [0.05, -0.04, 0.02],
    "same": BASE + [0.001, -0.001, 0.0005],
    "block=prenorm,lr=0.004": BASE - 0.3,
    "block=postnorm,lr=0.002": BASE - 0.3 + [0.20, 0.21, 0.22],
}
GRID = [  # pre-norm's best (4e-3) is the highest rate it tried; post-norm's (2e-3) inside
    ("prenorm", 1e-3, 2.6),
    ("prenorm", 2e-3, 2.4),
    ("prenorm", 4e-3, 2.2),
    ("postnorm", 1e-3, 2.7),
    ("postnorm", 2e-3, 2.5),
    ("postnorm", 4e-3, None),
]
EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
TUNING_SEED = 7  # the sweep's trials: apart from the evaluation seeds 0-2


def _metrics(final: float, start: int, probes: bool = False, domains: bool = False) -> list[Metric]:
    ts = lambda step: start + 1000 * step  # noqa: E731
    out = [Metric("val/bpb", final, ts(STEPS), STEPS), Metric("val/loss", final, ts(STEPS), STEPS)]
    if domains:  # a held-out suite: a trained domain and one never trained on (`DOMAINS`)
        out += [Metric("val/verse/bpb", final - 0.5, ts(STEPS), STEPS)]
        out += [Metric("val/code/bpb", 2 * final, ts(STEPS), STEPS)]
    if probes:  # the bad arm's attention logits, which only an axis that opts in draws
        out += [Metric("probe/attn_max_logit/layer0", 5.0 * s, ts(s), s) for s in (5, STEPS)]
    for step in (5, STEPS):
        out += [
            Metric("val/bpb_sampled", final + 0.5 * (STEPS - step) / STEPS, ts(step), step),
            Metric("train/tokens", float(step * BATCH * SEQ), ts(step), step),
            Metric("time/elapsed_s", float(step), ts(step), step),
            Metric("perf/tokens_per_s", 3200.0, ts(step), step),
        ]
    return out


DOMAINS = {  # the params of a suite: verse's held-out documents, and code's corpus of its own
    "data.sources.verse.corpus": "corpus/verse",
    "data.eval_sets.verse.source": "verse",
    "data.eval_sets.code.corpus": "corpus/code",
}


def _params(**extra: str) -> dict[str, str]:
    return {
        "train.steps": str(STEPS),
        "train.batch_size": str(BATCH),
        "train.seq_len": str(SEQ),
        "flops_per_token": str(FLOPS_PER_TOKEN),
        "num_params": "1000",
        "num_active_params": "1000",
        "model.vocab_size": "256",
        **extra,
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Experiments `arms` (a baseline and four arms, 3 paired seeds each) and `grid` (a
    sweep's trials, one failed, then the invocation of its best.yaml: two tuned arms)."""
    root = tmp_path_factory.mktemp("study-store")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    start = T0
    exp = client.create_experiment("arms", artifact_location=str(root / "arms"))
    parent = log_parent(client, exp, "arms", start)
    for variant in ("base", "good", "bad", "noisy", "same"):
        for seed in range(3):
            start += 1000
            log_child(
                client, exp, parent, variant, seed, start,
                params=_params(**DOMAINS),
                metrics=_metrics(
                    FINAL[variant][seed], start, probes=variant == "bad", domains=True
                ),
            )  # fmt: skip
    exp = client.create_experiment("grid", artifact_location=str(root / "grid"))
    parent = log_parent(client, exp, "grid/block", start)
    for trial, (block, lr, final) in enumerate(GRID):
        start += 1000
        log_child(
            client, exp, parent, f"trial-{trial}", TUNING_SEED, start,
            params=_params(**{"model.block": block, "train.optimizer.lr": str(lr)}),
            metrics=[] if final is None else _metrics(final, start),
            status="FINISHED" if final is not None else "FAILED",
            tags={"trial_number": str(trial), "study": f"grid/block={block}"},
        )  # fmt: skip
    start += 1000
    parent = log_parent(client, exp, "grid-best", start)
    for variant in ("block=prenorm,lr=0.004", "block=postnorm,lr=0.002"):
        block, lr = (part.split("=")[1] for part in variant.split(","))
        for seed in range(3):
            start += 1000
            log_child(
                client, exp, parent, variant, seed, start,
                params=_params(**{"model.block": block, "train.optimizer.lr": lr}),
                metrics=_metrics(FINAL[variant][seed], start),
            )  # fmt: skip
    return uri


MANIFEST = {
    "name": "fixture",
    "title": "A fixture study",
    "description": "Arms with known differences.",
    "equivalence_margin": 0.02,
    "tuning_seeds": [TUNING_SEED],
    "streams": [["minimind run a.yaml"]],
    "arms": {
        "base": {"label": "baseline", "experiment": "arms", "variant": "base"},
        "good": {"label": "good", "experiment": "arms", "variant": "good"},
        "bad": {"label": "bad", "experiment": "arms", "variant": "bad"},
        "noisy": {"label": "noisy", "experiment": "arms", "variant": "noisy"},
        "same": {"label": "same", "experiment": "arms", "variant": "same"},
        "pre": {
            "label": "pre tuned",
            "experiment": "grid",
            "where": {"model.block": "prenorm"},
        },
        "post": {
            "label": "post tuned",
            "experiment": "grid",
            "where": {"model.block": "postnorm"},
        },
    },
    "axes": [
        {
            "name": "first",
            "title": "First axis",
            "expected": "good better, bad better, noisy worse",
            "references": ["Somebody 2020"],
            "comparisons": [
                {
                    "arm": "good",
                    "against": "base",
                    "expect": "better",
                    "source": "Good 2019: ahead",
                },
                {"arm": "bad", "against": "base", "expect": "better"},
                {"arm": "noisy", "against": "base", "expect": "worse"},
            ],
        },
        {
            "name": "second",
            "title": "Second axis",
            "expected": "same equal; post-norm worse than pre-norm at their tuned rates",
            "references": ["Somebody else 2021"],
            "comparisons": [
                {"arm": "same", "against": "base", "expect": "equal"},
                {"arm": "post", "against": "pre", "expect": "worse"},
            ],
            "sensitivity": [{"experiment": "grid", "x": "train.optimizer.lr", "by": "model.block"}],
            "discussion": "Written after the runs.",
        },
    ],
}


def _write(tmp_path: Path, manifest: dict) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True))
    return path


@pytest.fixture(scope="module")
def results(store: str, tmp_path_factory: pytest.TempPathFactory):
    study = load_study(_write(tmp_path_factory.mktemp("manifest"), MANIFEST))
    return study, analyse(study, store)[0]


def test_each_axis_is_one_corrected_family_with_its_own_references(results) -> None:
    _, (first, second) = results
    assert first.comparison.n_comparisons == 3 and second.comparison.n_comparisons == 2
    good = first.findings[0].row
    d = FINAL["good"] - FINAL["base"]
    expected = stats.ttest_rel(FINAL["good"], FINAL["base"]).confidence_interval(1 - 0.05 / 3)
    assert good["val/bpb_delta_method"] == "paired"
    assert good["val/bpb_delta"] == pytest.approx(d.mean())
    assert good["val/bpb_delta_low"] == pytest.approx(expected.low)
    assert good["val/bpb_delta_high"] == pytest.approx(expected.high)
    post = second.findings[1].row  # against the tuned pre-norm arm, not the axis's baseline
    assert post["val/bpb_delta"] == pytest.approx(0.21)
    assert post["reference"] == "pre tuned"
    # The better arm ends below anything the baseline reached: at least the baseline's budget.
    # A bound, never written as the multiplier itself.
    assert first.findings[0].row["compute_x_where"] == "beyond"
    assert first.findings[0].row["compute_x_bound"] == pytest.approx(1.0)
    assert math.isnan(first.findings[0].row["compute_x"])


def test_findings_agree_disagree_or_are_too_weak_to_tell(results) -> None:
    _, (first, second) = results
    assert [f.agreement for f in first.findings] == ["agrees", "disagrees", "too weak to tell"]
    assert [f.agreement for f in second.findings] == ["agrees", "agrees"]
    # Too weak to tell: the paired seeds that would detect a difference of the study's margin
    # (its smallest difference of interest), never one the size observed (post-hoc power).
    d = FINAL["noisy"] - FINAL["base"]
    plan = plan_seeds("difference", 0.02, d.std(ddof=1), df=2, comparisons=3)
    assert [f.plan for f in first.findings] == [None, None, plan]
    assert plan.fewest < plan.seeds < plan.most


def _row(
    delta: float, low: float, high: float, simultaneous: tuple[float, float] | None = None
) -> pd.Series:
    """An axis-table row whose test rejects exactly when its interval excludes zero; its
    simultaneous (Bonferroni) interval is `simultaneous`, by default the row's own (a first
    Holm step)."""
    sim_low, sim_high = (low, high) if simultaneous is None else simultaneous
    return pd.Series(
        {
            "m_delta": delta,
            "m_delta_low": low,
            "m_delta_high": high,
            "m_delta_low_simultaneous": sim_low,
            "m_delta_high_simultaneous": sim_high,
            "m_delta_method": "paired",
            "m_within_noise": low <= 0 <= high,
        }
    )


@pytest.mark.parametrize(
    ("expect", "row", "answer"),
    [
        ("equal", _row(0.0, -0.01, 0.01), "agrees"),
        ("equal", _row(0.05, 0.03, 0.07), "disagrees"),
        ("equal", _row(0.015, 0.005, 0.025), "too weak to tell"),  # real, but maybe within
        ("equal", _row(0.0, -0.05, 0.05), "too weak to tell"),
        # A later Holm step's interval inside the margin, the simultaneous one not: not settled.
        ("equal", _row(0.0, -0.015, 0.015, (-0.025, 0.025)), "too weak to tell"),
        ("equal", _row(0.03, 0.025, 0.035, (0.015, 0.045)), "too weak to tell"),
        ("better", _row(-0.05, -0.07, -0.03), "agrees"),  # lower is better
        ("better", _row(0.05, 0.03, 0.07), "disagrees"),
        ("worse", _row(0.05, 0.03, 0.07), "agrees"),
        ("worse", _row(0.01, -0.03, 0.05), "too weak to tell"),
    ],
)
def test_agreement_rules(expect: str, row: pd.Series, answer: str) -> None:
    assert agreement(expect, row, "m", margin=0.02, maximize=False) == answer


def test_the_report_is_rendered_from_the_runs(store: str, tmp_path: Path) -> None:
    d = FINAL["noisy"] - FINAL["base"]
    plan = plan_seeds("difference", 0.02, d.std(ddof=1), df=2, comparisons=3)
    mde = detectable_difference(3, d.std(ddof=1), comparisons=3)
    # one look at the 3 seeds trained: the design stops (or not) where a fixed test would
    manifest = _write(tmp_path, {**MANIFEST, "sequential": {"looks": [3]}})
    folder = tmp_path / "report"
    argv = ["study", "report", str(manifest), "--tracking-uri", store, "--report-dir", str(folder)]
    code = main(argv)
    assert code == 0
    files = {p.name for p in folder.iterdir()}
    assert {"index.html", "report.md", "findings.csv", "runs.csv"} <= files
    assert {"first_curves.png", "first_final.png", "second_lr0.png", "forest.png"} <= files
    report = (folder / "report.md").read_text()
    for text in ("## First axis", "**Expected**: good better", "Somebody 2020", "**disagrees**",
                 ": better. Good 2019: ahead"):  # fmt: skip
        assert text in report
    assert (
        f"too weak to tell (MDE {mde:.2g}; {plan.sentence()})" in report
        and "**Discussion**: Written after the runs." in report
    )
    assert "| 320 | 3.2e+05 |" in report  # tokens and FLOPs per run: 10 x 4 x 8, x 1000
    # each seed's difference beside the mean, so that a seed unlike the others shows
    assert "a difference; per seed: 0 -0.1000, 1 -0.1100, 2 -0.1200" in report
    # the held-out suite by domain beside the objective, the domain never trained on marked
    assert "| domain | trained on | good − baseline | bad − baseline | noisy − baseline |" in report
    assert "| verse | yes | -0.1100 [" in report and "| code | no | -0.2200 [" in report
    assert "git commit of the runs" in report and "minimind run a.yaml" in report
    assert f"Arm cost: not measured (run `minimind study bench {manifest}`)." in report
    findings = pd.read_csv(folder / "findings.csv")
    # each row names the interval that decides it; where the sequential design stopped, that one
    stopped = findings["sequential_stop"].isin(["difference", "equivalent", "cap"])
    assert stopped.any() and findings["decided_basis"][stopped].str.startswith("sequential").all()
    assert (findings["decided_low"][stopped] == findings["sequential_low"][stopped]).all()
    assert list(findings["agreement"]) == [
        "agrees", "disagrees", "too weak to tell", "agrees", "agrees",
    ]  # fmt: skip
    html = (folder / "index.html").read_text()
    # the axes' curves and finals, the lr figure, the tuned arms' tuning runs and the forest plot
    assert html.count("data:image/png;base64,") == 7 and 'class="disagrees"' in html
    assert (folder / "second_tuning0.png").exists()


def test_the_report_plans_a_difference_of_the_effect_the_study_plans_for(
    store: str, tmp_path: Path
) -> None:
    # `minimind study plan` and the report's statements plan for one difference: planning.effect
    d = FINAL["noisy"] - FINAL["base"]
    plan = plan_seeds("difference", 0.05, d.std(ddof=1), df=2, comparisons=3)
    manifest = _write(
        tmp_path, {**MANIFEST, "sequential": {"looks": [3]}, "planning": {"effect": 0.05}}
    )
    folder = tmp_path / "report"
    argv = ["study", "report", str(manifest), "--tracking-uri", store, "--report-dir", str(folder)]
    assert main(argv) == 0
    assert plan.sentence() in (folder / "report.md").read_text()
    assert "detect a difference of 0.05" in plan.sentence()


def test_the_report_tables_are_made_from_the_numbers(store: str, tmp_path: Path) -> None:
    """An interval is set under its value and an agreement coloured by the finding itself, not
    by reading formatted text back: a label with a bracket stays whole."""
    from minimind.study import report

    manifest = copy.deepcopy(MANIFEST)
    manifest["arms"]["good"]["label"] = "good [lr 3e-3]"
    study = load_study(_write(tmp_path, manifest))
    results = analyse(study, store)[0]
    page = report.document(study, results, {}, {}, {}).html()
    assert "<td>good [lr 3e-3]</td>" in page
    finding = results[0].findings[0]
    m, row = study.metric, finding.row
    delta, low, high = row[f"{m}_delta"], row[f"{m}_delta_low"], row[f"{m}_delta_high"]
    assert f'<td>{delta:+.4f}<br><span class="ci">[{low:+.4f}, {high:+.4f}]</span></td>' in page
    assert f'<td class="{finding.agreement.replace(" ", "-")}">' in page


def test_the_report_shows_each_arm_s_measured_cost_beside_it(results, tmp_path: Path) -> None:
    """The cost columns come from cost.csv (measured alone), never the runs' logged tok/s."""
    from minimind.study import report
    from minimind.study.cost import COLUMNS, COST_FILE, CostTable, read_cost

    study, axes = results
    measured = pd.DataFrame(
        [
            {
                "arm": "base",
                "ms_per_step": 12.5,
                "ms_per_step_min": 12.0,
                "ms_per_step_max": 13.25,
                "cost_ratio": 1.0,
            },
            {
                "arm": "good",
                "ms_per_step": 25.0,
                "ms_per_step_min": 24.0,
                "ms_per_step_max": 26.0,
                "cost_ratio": 2.01,
            },
            {"arm": "bad", "note": "arms.bad: no stream's `minimind run` command trains it"},
        ],
        columns=COLUMNS,
    )
    environment = {"measured": "2026-01-01 00:00 UTC", "cost baseline": "base (baseline)"}
    CostTable(environment, measured).write(tmp_path / COST_FILE)
    cost = read_cost(tmp_path / COST_FILE)
    page = report.document(study, axes, {}, {}, {}, cost, "s.yaml").markdown()
    rows = {line.split(" | ")[0]: line for line in page.splitlines() if line.startswith("| ")}
    assert "| 12.5 [12.0, 13.2] | 1.000 |" in rows["| baseline"]
    assert "| 25.0 [24.0, 26.0] | 2.010 |" in rows["| good"]
    assert "| not measured | - |" in rows["| bad"] and "| not measured | - |" in rows["| noisy"]
    assert "cost × is the median of the per-round ratios to base (baseline)" in page
    assert "3.2k" not in page and "3,200" not in page  # the runs' shared-core throughput
    html = report.document(study, axes, {}, {}, {}, cost, "s.yaml").html()
    assert '<td>12.5<br><span class="ci">[12.0, 13.2]</span></td><td>1.000</td>' in html


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda m: m["axes"][0]["comparisons"][0].update(arm="gooood"),
            "axes[0].comparisons[0].arm: unknown arm 'gooood'",
        ),
        (lambda m: m["axes"][0]["comparisons"][1].update(arm="good"), "compared twice"),
        (
            lambda m: m["axes"][0]["comparisons"][1].update(previous={"arm": "b", "against": "a"}),
            "axes[0].comparisons[1].previous: names a row of no previous study",
        ),
        (lambda m: m["arms"]["bad"].update(label="good"), "arms.bad.label: label 'good'"),
        (lambda m: m["arms"]["bad"].update(where={"x": 1}), "give exactly one of variant"),
        (lambda m: m.update(streams=[["python evil.py"]]), "streams[0][0]: a step is `minimind"),
        (lambda m: m["axes"][0]["comparisons"][0].update(expect="nicer"), "expect"),
        (lambda m: m.update(streams=[["minimind run 'a.yaml"]]), "streams[0][0]: cannot be split"),
        (
            lambda m: m.update(streams=[[{"run": "a.yaml", "seeds": [-1]}]]),
            "streams[0][0].seeds[0]",
        ),
        (lambda m: m.update(streams=[[]]), "streams[0]: must have at least 1 item"),
        (
            lambda m: m["axes"][1]["sensitivity"][0].update(x="train.optimizer.lrr"),
            "axes[1].sensitivity[0].x: no run of grid has param train.optimizer.lrr",
        ),
        (
            lambda m: m["arms"]["post"].update(where={"model.blok": "postnorm"}),
            "arms.post.where: no run of grid has param model.blok",
        ),
        (
            lambda m: m["arms"]["post"].update(where={"train.steps": 10}),
            "arms.post: where {'train.steps': 10} matches variants",
        ),
        (lambda m: m.update(equivalence_margin=0), "equivalence_margin"),
    ],
)
def test_bad_manifests_exit_2_naming_the_field(
    store: str, tmp_path: Path, capsys, change, message: str
) -> None:
    manifest = yaml.safe_load(yaml.safe_dump(MANIFEST))
    change(manifest)
    _report_refused(manifest, store, tmp_path, capsys, message)


def _report_refused(manifest: dict, store: str, tmp_path: Path, capsys, message: str) -> None:
    """`study report` of `manifest` exits 2 with one line holding `message`, writing nothing."""
    path = _write(tmp_path, manifest)
    report = ["--tracking-uri", store, "--report-dir", str(tmp_path / "r")]
    assert main(["study", "report", str(path), *report]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_an_arm_without_runs_exits_2_naming_it(store: str, tmp_path: Path, capsys) -> None:
    manifest = yaml.safe_load(yaml.safe_dump(MANIFEST))
    manifest["arms"]["noisy"]["variant"] = "never-ran"
    path = _write(tmp_path, manifest)
    report = ["--tracking-uri", store, "--report-dir", str(tmp_path / "r")]
    assert main(["study", "report", str(path), *report]) == 2
    assert "arms.noisy: no run of variant 'never-ran' in arms" in capsys.readouterr().err


def test_streams_run_side_by_side_and_a_stream_stops_at_its_failure(tmp_path: Path) -> None:
    manifest = yaml.safe_load(yaml.safe_dump(MANIFEST))
    spec = EXPERIMENTS / "quickstart.yaml"
    manifest["streams"] = [
        [f"minimind sweep {spec} --best"],  # no sweep: section, exit 2 (after stream 2's start)
        ["minimind run missing.yaml", f"minimind run {spec}"],
    ]
    study = load_study(_write(tmp_path, manifest))
    failures = train(study, tmp_path / "logs")
    assert sorted((f.stream, command_line(f.step), f.exit_code) for f in failures) == [
        (1, f"minimind sweep {spec} --best", 2),
        (2, "minimind run missing.yaml", 2),
    ]
    first = (tmp_path / "logs" / "stream1.log").read_text()
    assert "sweep: missing: `minimind sweep` needs a sweep" in first
    second = (tmp_path / "logs" / "stream2.log").read_text()
    assert "missing.yaml" in second and "quickstart" not in second


STUDY = EXPERIMENTS / "study"


def test_the_shipped_study_names_arms_its_specs_make(assembled_corpus: Path) -> None:
    study = load_study(STUDY / "study.yaml")
    specs = {}
    for path in sorted(STUDY.glob("*.yaml")):
        if path.name != "study.yaml":
            spec = load_spec(path)
            specs[spec.name] = spec
    variants = {name: {v.name for v in expand(spec)} for name, spec in specs.items()}
    for key, arm in study.arms.items():
        if arm.variant is not None:
            assert arm.variant in variants[arm.experiment], key
        else:  # a sweep's best.yaml logs into the sweep's experiment, with a cell's assignments
            cells = [v.spec for v in expand(specs[arm.experiment])]
            assert any(
                all(_flat_value(cell, k) == str(v) for k, v in arm.where.items()) for cell in cells
            ), key
    for ladder in study.ladders:  # each ladder arm named as its spec tags it
        spec = load_spec(EXPERIMENTS / f"{ladder.experiment}.yaml")
        assert spec.name == ladder.experiment
        assert set(ladder.axes) <= {v.arm for v in expand(spec)}, ladder.experiment
    specs_run = {step.spec for stream in study.streams for step in stream}
    extended = {
        (path.parent / read_yaml_mapping(path)["extends"]).resolve().name
        for path in STUDY.glob("*.yaml")
        if "extends" in read_yaml_mapping(path)
    }
    for path in STUDY.glob("*.yaml"):  # every spec trains in a stream, or is the base of one
        if path.name != "study.yaml" and path.name not in extended:
            assert f"experiments/study/{path.name}" in specs_run, path.name


def _flat_value(spec, key: str) -> str:
    return str(flatten(spec).get(key))


@pytest.mark.parametrize("size", ["small", "large"])
def test_every_arm_of_a_size_trains_the_same_tokens_per_parameter(
    size: str, assembled_corpus: Path
) -> None:
    """Within 1% of the baseline's parameters on the same steps: the sizes' budgets (20 and 5
    tokens per parameter) hold for every arm, the post-norm and Muon sweeps' arms included."""
    specs = [load_spec(STUDY / f"tune_{size}{part}.yaml") for part in ("", "_postnorm", "_muon")]
    variants = [v for spec in specs for v in expand(spec)]
    baseline = variants[0].spec
    params = baseline.model_config_obj().num_params()
    for variant in variants:
        assert variant.spec.train.steps == baseline.train.steps, variant.name
        assert abs(variant.spec.model_config_obj().num_params() / params - 1) < 0.01, variant.name
    per_param = baseline.train.steps * baseline.train.tokens_per_step / params
    assert per_param == pytest.approx({"small": 20, "large": 5}[size], rel=0.002)


def test_the_lower_learned_positions_grid_trains_the_model_of_the_cell_it_extends(
    assembled_corpus: Path,
) -> None:
    """tune_large_learned.yaml takes tune_large.yaml's learned-positions cell below its grid: the
    same model (the MLP width that spec's `match` gives it) and training; only the rates tried
    and the names differ."""
    (cell,) = (
        v for v in expand(load_spec(STUDY / "tune_large.yaml")) if v.name == "position=learned"
    )
    (lower,) = expand(load_spec(STUDY / "tune_large_learned.yaml"))
    named = ("name", "description", "tracking.", "match.", "sweep.")
    differ = {
        key
        for key in set(flatten(cell.spec)) | set(flatten(lower.spec))
        if flatten(cell.spec).get(key) != flatten(lower.spec).get(key)
    }
    assert {key for key in differ if not key.startswith(named)} == set()
    assert "sweep.params.train.optimizer.lr.choices" in differ


def test_a_missing_manifest_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="file not found"):
        load_study(tmp_path / "nope.yaml")


def test_the_learning_rate_figure_draws_the_sweep_s_trials_alone(store: str) -> None:
    sensitivity = Sensitivity(experiment="grid", x="train.optimizer.lr", by="model.block")
    fig = sensitivity_figure(sensitivity, load_runs(store, ["grid"], all_runs=True), "val/bpb")
    # pre-norm: three finished trials; post-norm: two finished and one failed (a cross); the
    # best.yaml runs logged beside them are no trials.
    assert sorted(len(line.get_xdata()) for line in fig.axes[0].lines) == [1, 2, 3]


def test_an_equal_expectation_is_planned_by_tost_power() -> None:
    """'equal' too weak to tell: the pairs that put the corrected interval inside the margin
    (TOST power), not a difference test's sample size; 'better': a difference of the margin."""
    from types import SimpleNamespace

    from minimind.compare import Comparison
    from minimind.study.analysis import plan_finding

    a, b = np.array([2.00, 2.03, 1.99]), np.array([2.01, 2.00, 2.02])
    runs = pd.DataFrame(
        {
            "run_id": [f"r{i}" for i in range(6)],
            "group": ["a"] * 3 + ["b"] * 3,
            "seed": [0, 1, 2] * 2,
            "m": np.concatenate([a, b]),
        }
    )
    comparison = Comparison(
        table=pd.DataFrame(), runs=runs, problems=pd.DataFrame({"run_id": []}), metric="m",
        by="variant", baseline="b", runset=None, n_comparisons=4,  # type: ignore[arg-type]
    )  # fmt: skip
    study = SimpleNamespace(equivalence_margin=0.02, planned_difference=lambda: 0.02)
    sd = float(np.std(a - b, ddof=1))
    equal = plan_finding(comparison, "a", "b", "equal", study)  # type: ignore[arg-type]
    assert equal == plan_seeds("equivalence", 0.02, sd, df=2, comparisons=4)
    assert equal is not None and equal.goal == "equivalence"
    better = plan_finding(comparison, "a", "b", "better", study)  # type: ignore[arg-type]
    assert better == plan_seeds("difference", 0.02, sd, df=2, comparisons=4)
    assert equal.seeds is not None and better.seeds is not None and equal.seeds > better.seeds


def test_a_sweep_s_seeds_must_be_stated_as_tuning_seeds(store: str, tmp_path: Path, capsys):
    manifest = yaml.safe_load(yaml.safe_dump(MANIFEST))
    del manifest["tuning_seeds"]  # the trials' seed 7 could then evaluate the tuned arms
    path = _write(tmp_path, manifest)
    for action, extra in (("report", ["--report-dir", str(tmp_path)]), ("plan", [])):
        assert main(["study", action, str(path), "--tracking-uri", store, *extra]) == 2
        assert capsys.readouterr().err.startswith(
            "error: tuning_seeds: the sweep trials in grid ran seeds [7], which tuning_seeds "
            "does not"
        )


def test_runs_of_a_tuning_seed_never_evaluate_an_arm(store: str, tmp_path: Path) -> None:
    manifest = yaml.safe_load(yaml.safe_dump(MANIFEST))
    manifest["tuning_seeds"] = [TUNING_SEED, 2]  # as if seed 2 had tuned too
    study = load_study(_write(tmp_path, manifest))
    second = analyse(study, store)[0][1]
    assert set(second.comparison.runs["seed"]) == {0, 1}
    manifest["arms"]["pre"]["seeds"] = [1, 2]
    with pytest.raises(SpecError, match=r"arms.pre.seeds: seeds \[2\] are tuning seeds"):
        load_study(_write(tmp_path, manifest))


def test_runs_tried_past_the_grid_at_a_tuning_seed_settle_the_edge(
    store: str, tmp_path: Path
) -> None:
    shutil.copy(store.removeprefix("sqlite:///"), tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("edge", artifact_location=str(tmp_path / "edge"))
    parent = log_parent(client, exp, "edge", T0 + 10**6)
    past = _params(**{"model.block": "prenorm", "train.optimizer.lr": "0.008"})
    tuning_run = ""
    for seed, start in ((0, T0 + 10**6 + 1), (TUNING_SEED, T0 + 10**6 + 2)):
        tuning_run = log_child(
            client, exp, parent, "block=prenorm,lr=0.008", seed, start, params=past,
            metrics=_metrics(2.6, start),
        )  # fmt: skip
    manifest = copy.deepcopy(MANIFEST)
    manifest["arms"]["pre"]["tried_beyond"] = ["edge"]
    study = load_study(_write(tmp_path, manifest))
    assert analyse(study, uri)[0][1].findings[1].edges == ()
    # a run past the grid that beat every trial: the arm is not at the best value tried
    start = T0 + 10**6 + 3
    better_run = log_child(
        client, exp, parent, "block=prenorm,lr=0.016", TUNING_SEED, start,
        params={**past, "train.optimizer.lr": "0.016"}, metrics=_metrics(1.0, start),
    )  # fmt: skip
    (beaten,) = analyse(study, uri)[0][1].findings[1].edges
    assert "runs past its sweep's grid (train.optimizer.lr = 0.016) scored 1" in beaten
    # only a tuning seed's run tried anything: the evaluation seed's alone settles nothing
    for run in (tuning_run, better_run):
        client.delete_run(run)
    (edge,) = analyse(study, uri)[0][1].findings[1].edges
    assert "train.optimizer.lr = 0.004 is the highest value its sweep tried" in edge


def test_a_tuned_value_on_its_sweep_s_edge_is_flagged_in_the_report(results) -> None:
    from minimind.study import report

    study, axes = results
    tuned = axes[1].findings[1]  # post tuned vs pre tuned
    assert tuned.edges == (
        "pre tuned: train.optimizer.lr = 0.004 is the highest value its sweep tried "
        "([0.001, 0.004]): the optimum may lie beyond the range, so it is not tuned",
    )
    assert all(not f.edges for f in [*axes[0].findings, axes[1].findings[0]])
    assert f"warning: {tuned.edges[0]}" in report.observed(tuned, study.metric)
    assert "not tuned" in report._agreement_text(tuned, study.metric)
    findings = pd.read_csv(io.StringIO(report.findings_csv(study, axes)))
    assert findings["tuning_edges"].notna().tolist() == [False, False, False, False, True]


def test_an_equal_comparison_stopped_on_a_difference_says_what_is_left_open(results) -> None:
    from dataclasses import replace

    from minimind.stats.sequential import Standing
    from minimind.study import report

    study, axes = results
    same = axes[1].findings[0]  # expect equal
    stopped = Standing("difference", 2, 6, [(s, s) for s in range(6)], -0.07, -0.01, 0.02)
    finding = replace(same, standing=stopped, agreement="too weak to tell")
    assert report._verdict_text(finding, study.metric) == (
        "too weak to tell: a difference, whose interval reaches inside ±0.02 (equal within the "
        "margin is not ruled out)"
    )


def test_a_report_never_reads_another_study_s_cost(store: str, tmp_path: Path) -> None:
    manifest = _write(tmp_path, MANIFEST)
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "cost.csv").write_text("# study: another\narm,label,ms_per_step\nbase,baseline,1.0\n")
    argv = ["study", "report", str(manifest), "--tracking-uri", store, "--report-dir", str(folder)]
    code = main(argv)
    assert code == 0
    assert "Arm cost: not measured" in (folder / "report.md").read_text()


def _sourced(manifest: dict) -> dict:
    """`manifest` with sourced magnitudes and per-row references on the first axis (whose own
    references go), a margin rationale, and the bad arm's probes drawn on the first axis."""
    manifest = copy.deepcopy(manifest)
    first = manifest["axes"][0]
    del first["references"]
    first["probes"] = ["attn_max_logit"]
    good, bad, noisy = first["comparisons"]
    good.update(
        magnitude_bpb=[0.015, 0.02], source="Shazeer 2020", references=["Shazeer 2020, GLU"]
    )
    bad.update(references=["Other 2019, A paper"])
    noisy.update(magnitude_bpb=0.5, source="Big 2021", references=["Big 2021, Far larger"])
    manifest["margin_rationale"] = "half the smallest sourced effect, GLU's 0.015-0.02 bpb"
    return manifest


def test_each_row_states_its_sourced_magnitude_references_and_the_margin_s_reason(
    store: str, tmp_path: Path
) -> None:
    manifest = _write(tmp_path, {**_sourced(MANIFEST), "sequential": {"looks": [3]}})
    folder = tmp_path / "report"
    argv = ["study", "report", str(manifest), "--tracking-uri", store, "--report-dir", str(folder)]
    assert main(argv) == 0
    report = (folder / "report.md").read_text()
    assert (
        "| first | good vs baseline | better by 0.015–0.02 (Shazeer 2020) Shazeer 2020 |" in report
    )
    assert "| first | bad vs baseline | better Other 2019 |" in report
    assert "- good vs baseline: better by 0.015–0.02 (Shazeer 2020) (Shazeer 2020, GLU)" in report
    assert "| second | same vs baseline | equal within ±0.02 Somebody else 2021 |" in report
    assert (
        "**Equivalence margin ±0.02**: half the smallest sourced effect, GLU's 0.015-0.02 bpb"
        in report
    )
    # The noisy arm, expected worse by 0.5, is within noise: its interval rules the size out.
    findings = pd.read_csv(folder / "findings.csv").set_index("arm")
    assert findings.loc["noisy", "agreement"] == "disagrees"
    assert "disagrees: the interval rules out the sourced worse by 0.5 (Big 2021)" in report
    # Probe figures only where an axis opts in, and only those it names.
    files = {p.name for p in folder.iterdir()}
    assert "first_probe_attn_max_logit.png" in files
    assert not any(name.startswith("second_probe") for name in files)


def test_probe_figures_are_drawn_only_on_axes_that_name_them(store: str, tmp_path: Path) -> None:
    folder = tmp_path / "report"
    argv = ["study", "report", str(_write(tmp_path, MANIFEST)), "--tracking-uri", store]
    assert main([*argv, "--report-dir", str(folder)]) == 0
    assert not any("probe" in p.name for p in folder.iterdir())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda m: m["axes"][0]["comparisons"][0].pop("source"),
            "axes[0].comparisons[0].source: a magnitude names the source it is read from",
        ),
        (
            lambda m: m["axes"][0]["comparisons"][0].update(magnitude_bpb=[0.02, 0.01]),
            "axes[0].comparisons[0].magnitude_bpb: a range is [low, high]",
        ),
        (
            lambda m: m["axes"][0]["comparisons"][1].pop("references"),
            "axes[0].comparisons[1].references: name the sources",
        ),
        (lambda m: m["axes"][0].update(probes=["attn_max"]), "axes[0].probes[0]"),
        (
            lambda m: m["axes"][1]["comparisons"][0].update(magnitude_bpb=0.01, source="X 2020"),
            "axes[1].comparisons[0].magnitude_bpb: an `equal` expectation has no magnitude",
        ),
        (
            lambda m: m.update(previous={"findings": "nowhere.csv", "label": "old"}),
            "previous.findings: cannot read nowhere.csv",
        ),
        (
            lambda m: (
                m.update(previous={"findings": "results/study_shakespeare/findings.csv"}),
                m["previous"].update(label="old"),
                m["axes"][0]["comparisons"][0].update(previous={"arm": "x", "against": "y"}),
            ),
            "has no row 'x' vs 'y', which the comparison 'good' vs 'baseline' names",
        ),
    ],
)
def test_bad_expectations_exit_2_naming_the_field(
    store: str, tmp_path: Path, capsys, change, message: str
) -> None:
    manifest = _sourced(MANIFEST)
    change(manifest)
    _report_refused(manifest, store, tmp_path, capsys, message)


@pytest.mark.parametrize(
    ("magnitude", "row", "answer"),
    [
        (0.03, _row(0.0, -0.01, 0.01), "disagrees"),  # the sourced worsening is ruled out
        (0.005, _row(0.0, -0.01, 0.01), "too weak to tell"),  # still inside the interval
        (None, _row(0.0, -0.01, 0.01), "too weak to tell"),  # no size to rule out
        ([0.01, 0.2], _row(0.05, 0.03, 0.07), "agrees"),  # a difference, in its direction
    ],
)
def test_a_direction_with_a_sourced_size_disagrees_when_its_interval_rules_the_size_out(
    magnitude, row: pd.Series, answer: str
) -> None:
    from minimind.study.manifest import ArmComparison

    source = None if magnitude is None else "S 2020"
    c = ArmComparison(arm="a", against="b", expect="worse", magnitude_bpb=magnitude, source=source)
    assert agreement(c, row, "m", margin=0.02, maximize=False) == answer


@pytest.mark.parametrize(
    ("stop", "low", "high", "magnitude", "answer"),
    [
        ("equivalent", -0.012, 0.016, None, "too weak to tell"),  # MQA: not a contradiction
        ("equivalent", -0.012, 0.016, 0.02, "disagrees"),  # the sourced 0.02 is ruled out
        ("equivalent", -0.012, 0.016, 0.015, "too weak to tell"),
        ("cap", -0.005, 0.012, [0.015, 0.02], "disagrees"),
        ("difference", 0.02, 0.05, [0.015, 0.02], "agrees"),
    ],
)
def test_the_sequential_verdict_reads_a_direction_against_equivalence_honestly(
    stop: str, low: float, high: float, magnitude, answer: str
) -> None:
    from minimind.stats.sequential import Standing
    from minimind.study.manifest import ArmComparison
    from minimind.study.planning import sequential_agreement

    source = None if magnitude is None else "S 2020"
    c = ArmComparison(arm="a", against="b", expect="worse", magnitude_bpb=magnitude, source=source)
    standing = Standing(stop, 4, 12, [(s, s) for s in range(12)], low, high, 0.02)
    assert sequential_agreement(c, standing, maximize=False) == answer


def test_a_direction_stopped_equivalent_says_what_is_left_open(results) -> None:
    from dataclasses import replace

    from minimind.stats.sequential import Standing
    from minimind.study import report

    study, axes = results
    noisy = axes[0].findings[2]  # expect worse
    stopped = Standing("equivalent", 4, 12, [(s, s) for s in range(12)], -0.012, 0.016, 0.02)
    finding = replace(noisy, standing=stopped, agreement="too weak to tell")
    assert report._verdict_text(finding, study.metric) == (
        "too weak to tell: equivalent within ±0.02, so no change larger than the margin; a "
        "worse result smaller than it is not ruled out"
    )


def test_a_not_tuned_warning_is_set_apart_in_the_warning_colour(results) -> None:
    from minimind.study import report

    study, axes = results
    html = report.document(study, axes, {}, {}, {}).html()
    warning = html_escape(report.NOT_TUNED)
    assert f'<td class="agrees">agrees<br><span class="warning">{warning}</span></td>' in html
    assert "span.warning { color: #bc4c00" in html
    assert '<td class="agrees">agrees; not tuned' not in html


def test_the_report_sets_this_study_s_findings_beside_the_previous_study_s(
    store: str, tmp_path: Path
) -> None:
    """A previous study's findings.csv, one row changed each way: the table says which hold,
    flip, are newly decided or now undecided, with each row's `why`."""
    one_look = {**MANIFEST, "sequential": {"looks": [3]}}  # the 3 seeds trained decide
    first = tmp_path / "first"
    argv = ["study", "report", str(_write(tmp_path, one_look)), "--tracking-uri", store]
    assert main([*argv, "--report-dir", str(first)]) == 0
    old = pd.read_csv(first / "findings.csv")
    arm = old["arm"]
    assert list(old["sequential_stop"]) == [
        "difference",
        "difference",
        "cap",
        "equivalent",
        "difference",
    ]
    old.loc[arm == "good", "val/bpb_delta"] = 0.02  # was worse
    old.loc[arm == "bad", "sequential_stop"] = "cap"  # was undecided
    old.loc[arm == "noisy", ["sequential_stop", "val/bpb_delta"]] = ["difference", 0.02]
    old.loc[arm == "same", "axis"] = "renamed"  # joined by its arms' labels
    old.loc[arm == "post tuned", ["arm", "against"]] = ["post v1", "pre v1"]  # joined as named
    old = pd.concat([old, old[arm == "bad"].assign(arm="gone", axis="first")])
    old.to_csv(tmp_path / "old.csv", index=False)
    manifest = copy.deepcopy(one_look)
    manifest["previous"] = {"findings": str(tmp_path / "old.csv"), "label": "toy study"}
    manifest["axes"][0]["comparisons"][0]["why"] = "more tokens per parameter"
    manifest["axes"][1]["comparisons"][1]["previous"] = {"arm": "post v1", "against": "pre v1"}
    folder = tmp_path / "second"
    argv = ["study", "report", str(_write(tmp_path, manifest)), "--tracking-uri", store]
    assert main([*argv, "--report-dir", str(folder)]) == 0
    report = (folder / "report.md").read_text()
    section = report[report.index("## Compared with the toy study") :]
    rows = {line.split(" | ")[1]: line for line in section.splitlines() if line.startswith("| ")}
    assert rows["good vs baseline"].endswith("| flips | more tokens per parameter |")
    assert (
        "| worse (+0.020): agrees with better | better (-0.110): agrees" in rows["good vs baseline"]
    )
    assert "| newly decided |" in rows["bad vs baseline"]
    assert "| now undecided |" in rows["noisy vs baseline"]
    assert "| holds |" in rows["same vs baseline"]
    assert "(post v1 vs pre v1) |" in rows["post tuned vs pre tuned"]
    assert "| holds |" in rows["post tuned vs pre tuned"]
    assert "post v1 vs pre v1" not in rows  # not left over as "not repeated"
    assert "| not repeated |" in rows["gone vs baseline"]


def test_every_table_of_the_report_wraps_its_cells(results) -> None:
    """Tables stay within the page (about 1,400 px, checked in headless Chromium on the
    committed study): every table class the report renders wraps its cells, none keeps the
    comparison's one-line cells."""
    import re

    from minimind.study import report

    study, axes = results
    page = report.document(study, axes, {}, {}, {}).html()
    classes = set(re.findall(r'<table class="([\w-]+)"', page))
    assert {"findings", "comparison"} <= classes
    wrapped = re.search(r"^([^{}\n]*)\{ white-space: normal; \}", report.STUDY_CSS, re.M)
    assert wrapped is not None
    assert classes <= {c for c in re.findall(r"table\.([\w-]+) td", wrapped.group(1))}


def test_each_tuned_arm_s_sweep_runs_are_drawn_and_read_for_lr_sensitivity(results) -> None:
    from minimind.study import report

    study, axes = results
    second = axes[1]
    assert not axes[0].tuning  # no arm of the first axis was tuned
    assert list(second.tuning) == ["pre tuned", "post tuned"]  # the reference first
    (pre,) = second.tuning["pre tuned"]
    assert (pre.param, pre.chosen, pre.past.empty) == ("train.optimizer.lr", 0.004, True)
    assert sorted(pre.trials["params.train.optimizer.lr"].astype(float)) == [1e-3, 2e-3, 4e-3]
    (figure,) = tuning_figures(second.tuning, study.metric, "second").values()
    drawn = [
        (line.get_marker(), list(line.get_xdata()), list(line.get_ydata()))
        for line in figure.axes[0].lines
    ]
    assert [(m, x, y) for m, x, y in drawn if len(x)] == [
        ("o", [1e-3, 2e-3, 4e-3], [2.6, 2.4, 2.2]),  # pre-norm's trials
        ("*", [4e-3], [2.2]),  # the rate it was evaluated at
        ("o", [1e-3, 2e-3], [2.7, 2.5]),  # post-norm's, whose 4e-3 failed
        ("*", [2e-3], [2.5]),
        ("x", [4e-3], [2.7]),  # at the worst result drawn
    ]
    # pre-norm: the mean over its grid of the final loss less the best, (2.6 + 2.4 + 2.2) / 3 -
    # 2.2; post-norm's failed trial logged no loss, leaving two rates, too few for a sensitivity
    (row,) = report.tuned_sensitivity(second)
    assert (row.arm, row.lrs) == ("pre tuned", [1e-3, 2e-3, 4e-3])
    assert row.per_seed == pytest.approx([0.2])


def test_a_domain_is_out_of_distribution_when_no_training_source_draws_from_it() -> None:
    runs = pd.DataFrame([{
        "params.data.sources.verse.corpus": "corpus/verse",
        "params.data.sources.wiki.dataset": "wikitext",
        "params.data.eval_sets.verse.source": "verse",  # verse's held-out documents
        "params.data.eval_sets.wiki.dataset": "wikitext",  # a training source's own dataset
        "params.data.eval_sets.code.corpus": "corpus/code",
        "params.data.eval_sets.glosses.dataset": "wordnet",
        "params.data.eval_sets.glosses.split": "train",
    }])  # fmt: skip
    assert out_of_distribution(runs) == {"code", "glosses"}


def test_a_cost_table_of_other_arms_reads_as_not_measured(store: str, tmp_path: Path) -> None:
    manifest = _write(tmp_path, MANIFEST)
    folder = tmp_path / "report"
    folder.mkdir()
    # this study's name, but arms it no longer has (a study rewritten under its old name)
    (folder / "cost.csv").write_text(
        f"# study: {MANIFEST['name']}\narm,label,ms_per_step\nformer,former,1.0\n"
    )
    argv = ["study", "report", str(manifest), "--tracking-uri", store, "--report-dir", str(folder)]
    assert main(argv) == 0
    text = (folder / "report.md").read_text()
    assert f"Arm cost: not measured (run `minimind study bench {manifest}`)." in text
    assert "measured alone" not in text
