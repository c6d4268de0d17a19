"""`minimind compare` on a ladder: synthetic ladders whose answers are known, and a tiny
ladder trained and compared end to end."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from fake_ladder import RUNG_FLOPS, RUNG_STEPS, TOKENS_PER_STEP, write_ladder
from mlflow import MlflowClient

from minimind.cli import main
from minimind.compare import CompareOptions, load_runs
from minimind.compare.agreement import decision_agreement
from minimind.compare.ladder import compare_ladder, is_ladder
from minimind.compare.ladder_render import to_csv, to_markdown, to_plain


def _ladder(uri: str, multiplier, extrapolate_factor: float = 10.0):
    write_ladder(uri, multiplier)
    runset = load_runs(uri, ["lad"])
    assert is_ladder(runset)
    return compare_ladder(runset, extrapolate_factor=extrapolate_factor)


def test_a_constant_multiplier_is_read_at_every_rung_and_extrapolated(mlflow_uri: str) -> None:
    """The variant trains as if it had 0.6× its compute: 0.6× at every rung (read off the
    baseline's curves), the same exponent, 0.6× at 10× the top rung, no trend."""
    ladder = _ladder(mlflow_uri, lambda c: 0.6)
    assert [r.name for r in ladder.rungs] == ["r0", "r1", "r2", "r3"]
    assert [r.compute for r in ladder.rungs] == [
        RUNG_STEPS[r] * TOKENS_PER_STEP * RUNG_FLOPS[r] for r in RUNG_STEPS
    ]
    assert ladder.baseline == "arm=base"
    (result,) = ladder.results
    assert result.rungs["compute_x"].to_numpy() == pytest.approx([0.6] * 4, rel=0.01)
    assert list(result.rungs["compute_x_where"]) == ["inside"] * 4
    base, fast = ladder.arms["arm=base"].fit, ladder.arms["arm=fast"].fit
    assert base is not None and fast is not None
    assert base.exponent.value == pytest.approx(0.25, abs=1e-4)
    assert fast.exponent.value == pytest.approx(0.25, abs=1e-4)
    r = result.result
    assert r is not None and r.where == "inside"
    assert r.exponent_difference.value == pytest.approx(0.0, abs=1e-4)
    assert r.extrapolated_multiplier.value == pytest.approx(0.6, rel=1e-3)
    assert r.extrapolated_to == pytest.approx(10 * ladder.rungs[-1].compute)
    assert abs(r.trend_slope.value) < 0.005
    # The single-scale decision is the same at every rung, and it agrees with the top's.
    assert list(result.rungs["agrees_with_top"]) == [True] * 4
    assert ladder.ranking.loc["r0", "arm=base"] == 1 and ladder.ranking.loc["r0", "arm=fast"] == 2


def test_a_multiplier_that_grows_with_compute_is_a_trend_and_a_steeper_exponent(
    mlflow_uri: str,
) -> None:
    """0.5·(C / C_r0)^0.1: the per-rung multiplier grows by 10^0.1 per decade of compute, which
    the trend test finds, and the variant's law is the baseline's with α × 1.1."""
    c0 = 100 * TOKENS_PER_STEP * RUNG_FLOPS["r0"]
    ladder = _ladder(mlflow_uri, lambda c: 0.5 * (c / c0) ** 0.1, extrapolate_factor=4)
    (result,) = ladder.results
    expected = [0.5 * (r.compute / c0) ** 0.1 for r in ladder.rungs]
    assert result.rungs["compute_x"].to_numpy() == pytest.approx(expected, rel=0.01)
    r = result.result
    assert r is not None
    # The trend is that of each seed's paired Δ over the rungs, against log compute: the
    # variant's gap narrows as its multiplier grows towards 1, in its favour.
    assert r.trend == "grows" and r.trend_p < 0.05
    assert r.trend_slope.value == pytest.approx(_mean_delta_slope(ladder, result.arm), rel=1e-9)
    assert r.exponent_difference.value == pytest.approx(0.025, abs=1e-3)
    top = 4 * ladder.rungs[-1].compute
    assert r.extrapolated_to == pytest.approx(top)
    assert r.extrapolated_multiplier.value == pytest.approx(0.5 * (top / c0) ** 0.1, rel=0.01)
    text = to_plain(ladder)
    for rung in RUNG_STEPS:
        assert f"== Rung {rung}:" in text
    assert "arm=fast vs arm=base" in text and "grows" in text
    rows = list(csv.DictReader(io.StringIO(to_csv(ladder))))
    assert [row["rung"] for row in rows] == list(RUNG_STEPS)
    assert {row["trend"] for row in rows} == {"grows"}
    assert float(rows[0]["arm_exponent"]) == pytest.approx(0.275, abs=1e-3)


def _mean_delta_slope(ladder, arm: str) -> float:
    """The mean over seeds of the polyfit slope of variant − baseline on log rung compute,
    from the runs' final values."""
    runs = ladder.runset.runs
    final = {
        (row["tags.rung"], row["tags.arm"], int(row["seed"])): row["metrics.val/bpb"]
        for _, row in runs.iterrows()
    }
    x = np.log([r.compute for r in ladder.rungs])
    slopes = []
    for seed in sorted({s for _, _, s in final}):
        d = [final[r.name, arm, seed] - final[r.name, ladder.baseline, seed] for r in ladder.rungs]
        slopes.append(np.polyfit(x, d, 1)[0])
    return float(np.mean(slopes))


def test_every_markdown_table_of_a_ladder_stands_a_blank_line_below_its_title(
    mlflow_uri: str,
) -> None:
    """A table right under a line of text ("arm vs baseline, point by point:") is read as part of
    that paragraph, not as a table."""
    lines = to_markdown(_ladder(mlflow_uri, lambda c: 0.6)).splitlines()
    tops = [i for i, line in enumerate(lines) if line.startswith("|") and i and not lines[i - 1].startswith("|")]  # fmt: skip
    assert len(tops) == 4 + 3  # each rung's table; the fits, the results, point by point
    assert [lines[i - 1] for i in tops] == [""] * len(tops)


def test_an_unknown_baseline_arm_or_a_bad_factor_is_a_usage_error(mlflow_uri: str) -> None:
    from minimind.compare import CompareError

    write_ladder(mlflow_uri, lambda c: 0.6)
    runset = load_runs(mlflow_uri, ["lad"])
    with pytest.raises(CompareError, match="unknown --baseline 'nope'; arms: arm=base, arm=fast"):
        compare_ladder(runset, CompareOptions(baseline="nope"))
    with pytest.raises(CompareError, match="--extrapolate: must be a factor > 0"):
        compare_ladder(runset, extrapolate_factor=0)


@pytest.mark.slow
def test_a_tiny_ladder_runs_and_compares_with_its_ladder_section(
    write_spec, mlflow_uri, tmp_path: Path, capsys, one_thread
) -> None:
    """2 arms × 3 rungs × 2 seeds, a few steps each: the runs carry their rung and arm, and
    `minimind compare` gives each rung's comparison against its own baseline and the ladder
    section, in text, CSV and the report."""
    path = write_spec(
        seeds=[0, 1],
        ablate={"model.position": ["rope", "none"]},
        ladder={
            "tokens_per_param": 0.1,
            "evaluations": 3,
            "rungs": [
                {"name": "xs", "model": {"dim": 16}},
                {"name": "s", "model": {"dim": 32}},
                {"name": "m", "model": {"dim": 48, "n_layers": 2}},
            ],
        },
        train={"checkpoint_every": None, "sample_tokens": 0},
    )
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "== Ladder ==" in out  # the comparison printed after the run
    client = MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name("tiny")
    children = [
        r
        for r in client.search_runs([exp.experiment_id])
        if r.data.tags.get("minimind.role") == "child"
    ]
    assert len(children) == 12
    spec = yaml.safe_load(path.read_text())
    for run in children:
        tags = run.data.tags
        assert tags["variant"] == f"rung={tags['rung']},{tags['arm']}"
        assert tags["arm"] in ("position=rope", "position=none")
    steps = {r.data.tags["rung"]: int(r.data.params["train.steps"]) for r in children}
    assert steps["xs"] < steps["s"] < steps["m"]
    report = tmp_path / "report"
    argv = [
        "compare",
        "tiny",
        "--tracking-uri",
        mlflow_uri,
        "--report",
        "--report-dir",
        str(report),
    ]
    assert main([*argv, "--format", "csv", "--extrapolate", "5"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["arm"], r["rung"]) for r in rows] == [("position=none", n) for n in ("xs", "s", "m")]
    for row in rows:
        run = next(
            c
            for c in children
            if c.data.tags["rung"] == row["rung"] and c.data.tags["arm"] == "position=rope"
        )
        p = run.data.params
        spent = int(p["train.steps"]) * int(p["train.batch_size"]) * int(p["train.seq_len"])
        assert float(row["compute"]) == pytest.approx(spent * float(p["flops_per_token"]))
        assert row["baseline"] == "position=rope"
    assert spec["ladder"]["tokens_per_param"] == 0.1
    for name in ("index.html", "report.md", "ladder.csv", "ladder.png", "rung-xs/index.html"):
        assert (report / name).is_file(), name
    assert "position=none vs position=rope" in (report / "index.html").read_text()
    assert not math.isnan(float(rows[-1]["delta"]))


def test_a_variant_beyond_the_baselines_curves_still_has_its_trend_tested(
    mlflow_uri: str,
) -> None:
    """A variant worth 1.5× its compute ends below each baseline curve: every rung's
    multiplier is a bound, yet the trend is tested on every rung's paired Δ (no rung is left
    out for what it reads); the fits still give the extrapolated 1.5×."""
    ladder = _ladder(mlflow_uri, lambda c: 1.5)
    (result,) = ladder.results
    assert list(result.rungs["compute_x_where"]) == ["beyond"] * 4
    r = result.result
    assert r is not None and r.trend_slope.n == 3 and math.isfinite(r.trend_p)
    assert r.trend_slope.value == pytest.approx(_mean_delta_slope(ladder, result.arm), rel=1e-9)
    assert r.extrapolated_multiplier.value == pytest.approx(1.5, rel=1e-3)
    text = to_plain(ladder)
    assert "not tested" not in text
    assert "in val/bpb; 3 seeds (t dof 2), slopes on 4 points (dof 2)" in text


def test_decision_agreement_against_the_top_rung(mlflow_uri: str) -> None:
    """The variant is worse at the two small rungs (0.5x compute) and better at the two large
    ones (2x): their decisions and the ranking disagree with the top's, the large ones agree."""
    top_compute = RUNG_STEPS["r1"] * TOKENS_PER_STEP * RUNG_FLOPS["r1"]
    ladder = _ladder(mlflow_uri, lambda c: np.where(np.asarray(c) <= top_compute, 0.5, 2.0))
    table = decision_agreement(ladder, resamples=200)
    decisions = table[table["kind"] == "decision"].set_index("rung")
    assert list(decisions["top_rung"].unique()) == ["r3"]
    assert list(decisions["decision"]) == ["worse", "worse", "better", "better"]
    assert list(decisions["agrees"]) == [False, False, True, True]
    ranking = table[table["kind"] == "ranking"].set_index("rung")
    assert list(ranking["agreement"]) == [0.0, 0.0, 1.0, 1.0]  # one pair of arms
    assert list(ranking["agreement_low"]) == [0.0, 0.0, 1.0, 1.0]  # every seed agrees
    assert set(ranking["seeds"]) == {3} and set(ranking["arms"]) == {2}


def test_compare_json_on_a_ladder_has_the_decision_agreement(mlflow_uri: str, capsys) -> None:
    write_ladder(mlflow_uri, lambda c: 0.6)
    assert main(["compare", "lad", "--tracking-uri", mlflow_uri, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    rows = document["decision_agreement"]
    assert [r["rung"] for r in rows if r["kind"] == "ranking"] == ["r0", "r1", "r2", "r3"]
    assert all(r["agrees"] for r in rows if r["kind"] == "decision")


def test_the_table_reports_an_extrapolation_only_where_its_coverage_holds(
    mlflow_uri: str,
) -> None:
    """The ladder's table and CSV give the extrapolated multiplier with its simulated
    coverage where that holds, and otherwise say plainly that the ladder cannot support it,
    with the coverage measured."""
    import dataclasses

    ladder = _ladder(mlflow_uri, lambda c: 0.6)
    (result,) = ladder.results
    r = result.result
    assert r is not None and 0.0 <= r.extrapolation_coverage <= 1.0
    reported = dataclasses.replace(r, extrapolation_coverage=0.93, extrapolation_supported=True)
    withheld = dataclasses.replace(r, extrapolation_coverage=0.71, extrapolation_supported=False)
    texts = {}
    for name, value in (("reported", reported), ("withheld", withheld)):
        one = dataclasses.replace(ladder, results=[dataclasses.replace(result, result=value)])
        texts[name] = to_plain(one)
        rows = list(csv.DictReader(io.StringIO(to_csv(one))))
        assert {row["extrapolation_coverage"] for row in rows} == {
            str(value.extrapolation_coverage)
        }
        assert {row["extrapolation_supported"] for row in rows} == {
            str(value.extrapolation_supported)
        }
    assert "0.6 [" in texts["reported"] and "cannot support" not in texts["reported"]
    assert "; simulated coverage 93%)" in texts["reported"]
    assert (
        "not reported: this ladder cannot support an extrapolation to that compute (its 95% "
        "interval held the truth in 71% of ladders simulated at its rungs and noise; 90% needed)"
    ) in texts["withheld"]
