"""`minimind study plan`: seeds per comparison for a stated effect or margin, the cap's warning,
the A/A calibration row, and where the sequential design stands after the runs so far."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric

from minimind.cli import main
from minimind.stats.power import plan_seeds
from minimind.study import report
from minimind.study.analysis import analyse
from minimind.study.manifest import load_study

T0 = 1_700_000_000_000
BASE = np.array([2.50, 2.52, 2.54, 2.53, 2.50, 2.55])
FINAL = {  # val/bpb of seeds 0-5
    "base": BASE,
    "good": BASE - [0.100, 0.104, 0.098, 0.101, 0.103, 0.099],
    "same": BASE + [0.001, -0.001, 0.0005, 0.0, -0.0005, 0.001],
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("plan-store")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("arms", artifact_location=str(root / "arms"))
    start = T0
    parent = log_parent(client, exp, "arms", start)
    for variant, values in FINAL.items():
        for seed, value in enumerate(values):
            start += 1000
            log_child(
                client, exp, parent, variant, seed, start,
                params={"train.steps": "10"}, metrics=[Metric("val/bpb", value, start, 10)],
            )  # fmt: skip
    return uri


def manifest(**changes) -> dict:
    return {
        "name": "plan",
        "title": "A planned study",
        "equivalence_margin": 0.02,
        "streams": [["minimind run a.yaml"]],
        "arms": {
            "base": {"label": "baseline", "experiment": "arms", "variant": "base"},
            "good": {"label": "good", "experiment": "arms", "variant": "good"},
            "same": {"label": "same", "experiment": "arms", "variant": "same"},
            "base_a": {
                "label": "base A",
                "experiment": "arms",
                "variant": "base",
                "seeds": [0, 1, 2],
            },
            "base_b": {
                "label": "base B",
                "experiment": "arms",
                "variant": "base",
                "seeds": [3, 4, 5],
            },
        },
        "axes": [
            {
                "name": "first",
                "title": "First",
                "expected": "good better, same equal",
                "references": ["Somebody 2020"],
                "comparisons": [
                    {"arm": "good", "against": "base", "expect": "better"},
                    {"arm": "same", "against": "base", "expect": "equal"},
                ],
            },
            {
                "name": "calibration",
                "title": "A/A",
                "expected": "no difference",
                "references": ["Kohavi et al. 2020"],
                "comparisons": [{"arm": "base_b", "against": "base_a", "expect": "equal"}],
            },
        ],
        **changes,
    }


def write(tmp_path: Path, tree: dict) -> str:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return str(path)


def plan_text(tmp_path: Path, store: str, capsys, **changes) -> str:
    path = write(tmp_path, manifest(**changes))
    assert main(["study", "plan", path, "--tracking-uri", store]) == 0
    return capsys.readouterr().out


def block(text: str, name: str) -> str:
    """The lines of one comparison in the plan."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(name))
    return "\n".join(lines[start : start + 4])


def test_the_plan_states_the_seeds_for_a_stated_effect_and_margin(tmp_path, store, capsys):
    out = plan_text(tmp_path, store, capsys, planning={"effect": 0.01, "sd": 0.004})
    better = plan_seeds("difference", 0.01, 0.004, comparisons=2)
    equal = plan_seeds("equivalence", 0.02, 0.004, comparisons=2)
    assert better.sentence() in block(out, "good vs base")
    assert equal.sentence() in block(out, "same vs base")
    assert "cannot settle" not in out
    # a small effect the cap of 12 seeds cannot detect is flagged
    out = plan_text(tmp_path, store, capsys, planning={"effect": 0.002, "sd": 0.004})
    assert "warning: the cap of 12 seeds cannot settle it" in block(out, "good vs base")


def test_the_plan_measures_the_noise_from_the_runs_when_none_is_stated(tmp_path, store, capsys):
    out = plan_text(tmp_path, store, capsys, planning={"effect": 0.01})
    d = FINAL["good"] - FINAL["base"]
    measured = plan_seeds("difference", 0.01, float(np.std(d, ddof=1)), df=5, comparisons=2)
    assert measured.sentence() in block(out, "good vs base") and "5 df" in out


def test_the_sequential_standing_of_each_comparison(tmp_path, store, capsys):
    out = plan_text(tmp_path, store, capsys)
    assert "stopped at look 2 (6 seeds: 0-5): a difference" in block(out, "good vs base")
    assert "no plan" in block(out, "good vs base")  # no effect stated, none to plan for
    same = block(out, "same vs base")
    assert "equivalent within ±0.02" in same or "train both arms to 9 seeds" in same
    aa = block(out, "base_b vs base_a (A/A calibration)")
    assert "a difference" not in aa and "train both arms to 6 seeds" in aa


def test_an_aa_row_compares_one_arm_on_disjoint_seeds_and_finds_no_difference(tmp_path, store):
    study = load_study(write(tmp_path, manifest()))
    calibration = analyse(study, store)[0][1].findings[0]
    assert study.is_calibration(calibration.comparison)
    assert bool(calibration.row["val/bpb_within_noise"])  # no difference found
    assert calibration.row["n"] == 3


def test_aa_arms_must_take_disjoint_seeds(tmp_path, capsys):
    tree = manifest()
    tree["arms"]["base_b"]["seeds"] = [2, 3]
    assert main(["study", "plan", write(tmp_path, tree)]) == 2
    err = capsys.readouterr().err
    assert "axes[1].comparisons[0].arm" in err and "disjoint seeds" in err


def test_a_paired_calibration_row_pairs_by_seed_and_reports_as_calibration(tmp_path, store):
    tree = manifest()
    tree["axes"][0]["comparisons"][1]["calibration"] = True  # same vs base, paired A/A
    study = load_study(write(tmp_path, tree))
    paired = analyse(study, store)[0][0].findings[1]
    assert paired.calibration and not study.is_self_comparison(paired.comparison)
    assert paired.row["n"] == 6  # paired seed by seed over all six seeds, not split
    assert report._agreement_text(paired, "val/bpb").startswith("calibration: ")
    assert report.comparison_name(paired) == "same vs baseline (A/A calibration)"
    assert not analyse(study, store)[0][0].findings[0].calibration


def test_a_calibration_row_must_expect_equal(tmp_path, capsys):
    tree = manifest()
    tree["axes"][0]["comparisons"][0]["calibration"] = True  # good vs base, expect better
    assert main(["study", "plan", write(tmp_path, tree)]) == 2
    err = capsys.readouterr().err
    assert "axes[0].comparisons[0].calibration" in err and "expects `equal`" in err


def test_seeds_a_later_invocation_trains_join_the_earlier_ones(tmp_path, capsys):
    # the second look's seeds trained by another `minimind run` (`-o seeds=[3,4,5]`)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("arms", artifact_location=str(tmp_path / "arms"))
    start = T0
    for seeds in ([0, 1, 2], [3, 4, 5]):
        start += 1000
        parent = log_parent(client, exp, "arms", start)
        for variant in ("base", "good"):
            for seed in seeds:
                start += 1000
                log_child(
                    client, exp, parent, variant, seed, start, params={"train.steps": "10"},
                    metrics=[Metric("val/bpb", FINAL[variant][seed], start, 10)],
                )  # fmt: skip
    tree = manifest()
    tree["axes"] = [{**tree["axes"][0], "comparisons": tree["axes"][0]["comparisons"][:1]}]
    assert main(["study", "plan", write(tmp_path, tree), "--tracking-uri", uri]) == 0
    assert "stopped at look 2 (6 seeds: 0-5): a difference" in capsys.readouterr().out


def test_the_report_states_each_comparison_s_look_seeds_and_why(tmp_path, store):
    from minimind.study.planning import with_standings

    study = load_study(write(tmp_path, manifest()))
    results, _, runsets = analyse(study, store)
    results = with_standings(study, results, runsets)
    good, same = results[0].findings
    (calibration,) = results[1].findings
    assert good.standing.sentence().startswith("stopped at look 2 (6 seeds: 0-5): a difference")
    assert calibration.standing.sentence().startswith(
        "open after 3 paired seed(s) (3-5 against 0-2): train both arms to 6 seeds for look 2"
    )
    page = report.document(study, results, {}, {}, {}).html()
    # One interval per row: the stopping interval in the Δ column, the look and why beside it
    s = good.standing
    assert f'<span class="ci">[{s.low:+.4f}, {s.high:+.4f}]</span>' in page
    assert "<td>sequential, look 2 (6 seeds: 0-5): a difference</td>" in page
    markdown = report.document(study, results, {}, {}, {}).markdown()
    assert "sequential, look 2 (6 seeds: 0-5): a difference" in markdown
    row = good.row
    fixed = f"[{row['val/bpb_delta_low']:+.4f}, {row['val/bpb_delta_high']:+.4f}]"
    assert fixed not in markdown and fixed not in page  # never a second interval
    findings = pd.read_csv(io.StringIO(report.findings_csv(study, results)))
    row = findings.set_index("arm").loc["good"]
    assert (row["sequential_stop"], row["sequential_look"], row["sequential_seeds"]) == (
        "difference", 2, 6,
    )  # fmt: skip
    assert row["sequential_seeds_used"] == "0-5" and not row["calibration"]


def test_the_aa_row_is_the_report_s_calibration(tmp_path, store):

    study = load_study(write(tmp_path, manifest()))
    results = analyse(study, store)[0]
    (calibration,) = results[1].findings
    page = report.document(study, results, {}, {}, {}).html()
    assert "<td>base B vs base A (A/A calibration)</td>" in page
    assert "<td>good vs baseline</td>" in page  # other rows are not marked
    text = report._agreement_text(calibration, "val/bpb")
    assert text.startswith("calibration: ") and "FAILED" not in text
    findings = pd.read_csv(io.StringIO(report.findings_csv(study, results)))
    assert list(findings["calibration"]) == [False, False, True]
    # a difference between runs of one arm fails the calibration, in red
    row = calibration.row.copy()
    row["val/bpb_within_noise"] = False
    failed = dataclasses.replace(calibration, row=row)
    assert report._agreement_text(failed, "val/bpb") == (
        "calibration FAILED: a difference where there is none by construction"
    )
    assert report._agreement_cell(failed, "val/bpb").css == "disagrees"


@pytest.mark.parametrize(
    ("expect", "stop", "low", "high", "answer"),
    [
        ("better", "difference", -0.05, -0.01, "agrees"),  # lower is better
        ("better", "difference", 0.01, 0.05, "disagrees"),
        ("worse", "difference", 0.01, 0.05, "agrees"),
        # within the margin, a small change in the expected direction is still allowed
        ("worse", "equivalent", -0.013, 0.016, "too weak to tell"),
        ("better", "equivalent", -0.016, 0.013, "too weak to tell"),
        ("worse", "equivalent", -0.015, -0.001, "disagrees"),  # wholly improved: not worse
        ("better", "equivalent", 0.001, 0.015, "disagrees"),
        ("equal", "equivalent", -0.01, 0.01, "agrees"),
        ("equal", "difference", 0.03, 0.05, "disagrees"),  # wholly outside the margin
        ("equal", "difference", -0.07, -0.01, "too weak to tell"),  # real, maybe within it
        ("better", "open", -0.05, -0.01, "too weak to tell"),  # a fixed test is not the design's
        ("equal", "cap", -0.01, 0.01, "too weak to tell"),
    ],
)
def test_the_agreement_is_the_sequential_design_s(expect, stop, low, high, answer) -> None:
    from minimind.stats.sequential import Standing
    from minimind.study.planning import sequential_agreement

    standing = Standing(stop, 2, 6, [(s, s) for s in range(6)], low, high, margin=0.02)
    assert sequential_agreement(expect, standing, maximize=False) == answer
