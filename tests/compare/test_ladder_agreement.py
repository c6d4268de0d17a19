"""Decision agreement over a ladder's (rung, budget) points, against a computation by hand: the
decisions from paired t-tests Holm-corrected per point, the ranking agreement and its bootstrap
interval from a resampling of seeds written out here."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from agreement_by_hand import by_hand_agreement
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric
from scipy import stats

from minimind.cli import main
from minimind.compare import ladder_render, load_runs
from minimind.compare.agreement import COLUMNS, agreement_blocks, decision_agreement
from minimind.compare.ladder import compare_ladder
from minimind.compare.ladder_report import write_ladder_report
from minimind.compare.table import CompareOptions
from minimind.foundations.document import to_markdown

T0 = 1_700_000_000_000
SEEDS = (0, 1, 2)
ARMS = ("arm=a", "arm=b", "arm=c")  # arm=a the baseline (the first run's)
RUNG_FLOPS = {"r0": 1e5, "r1": 4e5}
BUDGETS = (100, 200)
# Each point's mean per arm; a seed moves every arm alike (paired) plus a little of its own.
MEANS = {
    ("r0", 100): (2.50, 2.55, 2.40),  # b worse, c better: every pair flipped against the top
    ("r0", 200): (2.40, 2.35, 2.401),  # b better, c within noise
    ("r1", 100): (2.20, 2.25, 2.30),  # b worse, c worse
    ("r1", 200): (2.00, 1.95, 2.10),  # the top: b better, c worse
}
SEED_SHIFT = (0.0, 0.02, -0.015)
NOISE = np.array(  # [seeds, arms]
    [[0.001, -0.002, 0.003], [-0.002, 0.001, -0.004], [0.002, 0.0015, 0.0005]]
)


def value(point: tuple[str, int], seed: int, arm: int) -> float:
    return MEANS[point][arm] + SEED_SHIFT[seed] + NOISE[seed, arm]


def write_budget_ladder(uri: str, experiment: str = "bud") -> None:
    """2 rungs × 2 budgets (branch runs tagged `budget`) × 3 arms × 3 seeds, `val/bpb` as
    `value` gives it."""
    client = MlflowClient(uri)
    exp = client.create_experiment(experiment)
    parent = log_parent(client, exp, experiment, T0)
    start = T0 + 1000
    for rung, flops in RUNG_FLOPS.items():
        for budget in BUDGETS:
            for k, arm in enumerate(ARMS):
                for seed in SEEDS:
                    start += 1000
                    v = value((rung, budget), seed, k)
                    log_child(
                        client, exp, parent, f"budget={budget},rung={rung},{arm}", seed, start,
                        params={"train.batch_size": "8", "train.seq_len": "16",
                                "train.grad_accum": "1", "train.steps": str(budget),
                                "flops_per_token": str(flops), "num_params": str(int(flops / 6))},
                        metrics=[Metric("val/bpb", v, 0, budget)],
                        tags={"rung": rung, "arm": arm, "budget": str(budget)},
                    )  # fmt: skip


def by_hand_decisions(point: tuple[str, int]) -> dict[str, str]:
    """Paired t-tests of b and c against a over the seeds, Holm over the two, at 0.05."""
    table = np.array([[value(point, s, k) for k in range(3)] for s in SEEDS])
    p = {arm: stats.ttest_rel(table[:, k], table[:, 0]).pvalue for k, arm in ((1, "arm=b"), (2, "arm=c"))}  # fmt: skip
    (first, p1), (second, p2) = sorted(p.items(), key=lambda kv: kv[1])
    adjusted = {first: min(1.0, 2 * p1), second: max(min(1.0, 2 * p1), p2)}
    out = {}
    for k, arm in ((1, "arm=b"), (2, "arm=c")):
        delta = table[:, k].mean() - table[:, 0].mean()
        out[arm] = "within noise" if adjusted[arm] >= 0.05 else ("better" if delta < 0 else "worse")
    return out


def by_hand_ranking(point: tuple[str, int], resamples: int) -> tuple[float, float, float]:
    small = np.array([[value(point, s, k) for k in range(3)] for s in SEEDS])
    large = np.array([[value(("r1", 200), s, k) for k in range(3)] for s in SEEDS])
    draws = np.random.default_rng(0).integers(0, 3, (resamples, 3))
    replicates = [by_hand_agreement(small[d], large[d]) for d in draws]
    low, high = np.quantile(replicates, [0.025, 0.975])
    return by_hand_agreement(small, large), float(low), float(high)


@pytest.fixture
def budget_uri(mlflow_uri: str) -> str:
    write_budget_ladder(mlflow_uri)
    return mlflow_uri


def test_every_rung_and_budget_against_the_largest(budget_uri: str) -> None:
    ladder = compare_ladder(load_runs(budget_uri, ["bud"]))
    table = decision_agreement(ladder, resamples=300)
    assert list(table.columns) == COLUMNS
    points = list(MEANS)
    decisions = table[table["kind"] == "decision"]
    assert set(decisions["top_rung"]) == {"r1"} and set(decisions["top_budget"]) == {200}
    for arm in ("arm=b", "arm=c"):
        mine = decisions[decisions["arm"] == arm]
        assert list(zip(mine["rung"], mine["budget"], strict=True)) == points
        expected = [by_hand_decisions(p)[arm] for p in points]
        assert list(mine["decision"]) == expected
        assert list(mine["agrees"]) == [e == expected[-1] for e in expected]
    # the decisions the values were made for, as the by-hand tests find them
    assert [by_hand_decisions(p)["arm=b"] for p in points] == ["worse", "better", "worse", "better"]
    assert [by_hand_decisions(p)["arm=c"] for p in points] == ["better", "within noise", "worse", "worse"]  # fmt: skip
    ranking = table[table["kind"] == "ranking"]
    assert list(zip(ranking["rung"], ranking["budget"], strict=True)) == points
    for (_, row), point in zip(ranking.iterrows(), points, strict=True):
        value_, low, high = by_hand_ranking(point, 300)
        assert row["agreement"] == pytest.approx(value_)
        assert (row["agreement_low"], row["agreement_high"]) == pytest.approx((low, high))
        assert row["seeds"] == 3 and row["arms"] == 3
    assert list(ranking["agreement"]) == pytest.approx([0.0, 1.0, 2 / 3, 1.0])


def test_the_report_has_the_section_and_the_csv_and_stdout_csv_is_unchanged(
    budget_uri: str, tmp_path: Path, capsys
) -> None:
    report = tmp_path / "report"
    argv = ["compare", "bud", "--tracking-uri", budget_uri, "--format", "csv"]
    assert main([*argv, "--report", "--report-dir", str(report)]) == 0
    out = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == out  # the ladder's rows alone, as without --report
    assert "kind" not in next(csv.reader(io.StringIO(out)))
    written = pd.read_csv(report / "decision_agreement.csv")
    assert list(written.columns) == COLUMNS
    expected = decision_agreement(compare_ladder(load_runs(budget_uri, ["bud"])))
    ranking = written[written["kind"] == "ranking"]
    assert list(ranking["agreement"]) == pytest.approx(list(expected[expected["kind"] == "ranking"]["agreement"]))  # fmt: skip
    assert list(ranking["agreement_low"]) == pytest.approx(
        list(expected[expected["kind"] == "ranking"]["agreement_low"])
    )
    assert list(written.loc[written["kind"] == "decision", "decision"]) == list(
        expected.loc[expected["kind"] == "decision", "decision"]
    )
    text = (report / "report.md").read_text()
    section = text[text.index("## Decision agreement") :]
    value_, low, high = by_hand_ranking(("r0", 200), 10_000)
    assert f"| r0 @ 200 steps | {value_:.3g} [{low:.3g}, {high:.3g}] | 3 | 3 |" in section
    assert "| arm=c vs arm=a | r0 @ 100 steps | better | worse | no |" in section
    assert "the largest, r1 @ 200 steps" in section


def test_the_json_has_every_point(budget_uri: str, capsys) -> None:
    assert main(["compare", "bud", "--tracking-uri", budget_uri, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["decision_agreement"]
    assert [[r["rung"], r["budget"]] for r in rows if r["kind"] == "ranking"] == [
        list(p) for p in MEANS
    ]


def test_a_single_seed_at_the_largest_point_has_no_ranking_agreement(budget_uri: str) -> None:
    runset = load_runs(budget_uri, ["bud"])
    top = (runset.runs["tags.rung"] == "r1") & (runset.runs["tags.budget"] == "200")
    ladder = compare_ladder(runset.subset(~top | (runset.runs["seed"] == 0)))
    table = decision_agreement(ladder, resamples=50)
    assert table[table["kind"] == "ranking"].empty
    assert len(table[table["kind"] == "decision"]) == 8  # 2 arms at 4 points
    text = to_markdown(agreement_blocks(table, "arm=a"))
    assert "No ranking agreement" in text and "ranking agreement with" not in text


def test_no_section_when_the_largest_point_has_only_the_baseline(
    budget_uri: str, tmp_path: Path
) -> None:
    runset = load_runs(budget_uri, ["bud"])
    top = (runset.runs["tags.rung"] == "r1") & (runset.runs["tags.budget"] == "200")
    ladder = compare_ladder(runset.subset(~top | (runset.runs["tags.arm"] == "arm=a")))
    assert decision_agreement(ladder, resamples=50).empty
    write_ladder_report(ladder, tmp_path, log_to_parent=False)
    assert "Decision agreement" not in (tmp_path / "report.md").read_text()
    assert pd.read_csv(tmp_path / "decision_agreement.csv").empty


def test_the_ladder_reads_every_rung_and_budget_as_a_point(budget_uri: str) -> None:
    """Each (rung, budget) is a point of its own: its comparison holds that budget's runs, the
    fits take every point of a seed, and the trend's slope is fitted on every point (by hand:
    numpy's least-squares line of each seed's paired Δ on log compute, t-tested over seeds)."""
    ladder = compare_ladder(load_runs(budget_uri, ["bud"]))
    points = [(r.rung, r.budget) for r in ladder.rungs]
    assert points == [("r0", 100), ("r0", 200), ("r1", 100), ("r1", 200)]
    assert [r.name for r in ladder.rungs] == ["r0@100", "r0@200", "r1@100", "r1@200"]
    for point in ladder.rungs:
        runs = point.comparison.runset.runs
        assert set(runs["params.train.steps"]) == {str(point.budget)}
        assert len(runs) == len(ARMS) * len(SEEDS)
        assert point.compute == RUNG_FLOPS[point.rung] * 8 * 16 * point.budget
        assert point.tokens_per_param == pytest.approx(
            8 * 16 * point.budget / int(RUNG_FLOPS[point.rung] / 6)
        )
    computes = np.array([r.compute for r in ladder.rungs])
    for arm in ARMS:
        fit = ladder.arms[arm].fit
        assert fit is not None and sorted(fit.points) == list(SEEDS)
        for seed, (compute, loss) in fit.points.items():
            assert sorted(compute) == sorted(computes)
            k = ARMS.index(arm)
            expected = {c: value(p, seed, k) for c, p in zip(computes, points, strict=True)}
            assert [expected[c] for c in compute] == pytest.approx(list(loss))
    for result in ladder.results:
        k = ARMS.index(result.arm)
        slopes = [
            np.polyfit(np.log(computes), [value(p, s, k) - value(p, s, 0) for p in points], 1)[0]
            for s in SEEDS
        ]
        r = result.result
        assert r is not None and r.trend_points == (4, 4) and r.trend_slope.n == 3
        assert r.trend_slope.value == pytest.approx(np.mean(slopes), rel=1e-9)
        assert r.trend_p == pytest.approx(stats.ttest_1samp(slopes, 0.0).pvalue, rel=1e-9)
        assert list(result.rungs["rung"]) == [r.name for r in ladder.rungs]
    text = to_markdown(ladder_render.ladder_section(ladder))
    assert "at 4 (rung, budget) points" in text
    assert "| 3 (2) | 4 (1) |" in text  # seeds fitted (t dof), points per seed (fit dof)
    assert "3 seeds (t dof 2), slopes on 4 points (dof 2)" in text


def test_a_budget_the_baseline_has_not_trained_is_no_point(budget_uri: str) -> None:
    """A baseline branch still to train (or failed) leaves its point out, not the ladder."""
    client = MlflowClient(budget_uri)
    runset = load_runs(budget_uri, ["bud"])
    runs = runset.runs
    gone = runs[
        (runs["tags.rung"] == "r0") & (runs["tags.budget"] == "100") & (runs["tags.arm"] == "arm=a")
    ]
    for run_id in gone["run_id"]:
        client.delete_run(run_id)
    assert len(gone) == 3
    ladder = compare_ladder(load_runs(budget_uri, ["bud"]), CompareOptions(baseline="arm=a"))
    assert [r.name for r in ladder.rungs] == ["r0@200", "r1@100", "r1@200"]
