"""Parts of the study report made from small tables: the arms' settings and train/val gap, the
forest plot, the previous study's verdicts beside this one's, and the lr sensitivity of a
`sensitivity:` entry by its `x` and `by`."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.patches import Rectangle

from minimind.compare.sensitivity import lr_sensitivities, sensitivity_rows
from minimind.stats.sequential import Standing
from minimind.study.analysis import Decided, Finding, deciding_interval
from minimind.study.arm_table import HEADERS, arm_rows
from minimind.study.forest import ForestRow, forest_figure
from minimind.study.manifest import ArmComparison
from minimind.study.previous import compare_findings, outcome


def _runs(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def test_each_arm_shows_its_settings_and_its_train_val_gap() -> None:
    base = {"params.train.optimizer": "adamw", "params.train.optimizer.lr": "0.003",
            "params.train.schedule": "cosine", "params.train.optimizer.weight_decay": "0.1",
            "params.train.steps": "10", "params.train.batch_size": "4",
            "params.train.seq_len": "8", "params.num_params": "1000", "status": "FINISHED"}  # fmt: skip
    runs = _runs(
        [
            {**base, "variant": "a", "run_id": "1", "metrics.train/loss": 4.0, "metrics.val/loss": 4.1},
            {**base, "variant": "a", "run_id": "2", "metrics.train/loss": 4.2, "metrics.val/loss": 4.5},
            {**base, "variant": "b", "run_id": "3", "params.train.optimizer.lr": "0.01",
             "params.train.schedule.warmup": "30", "metrics.train/loss": 5.0,
             "metrics.val/loss": 4.9},
            {**base, "variant": "b", "run_id": "4", "params.train.optimizer.lr": "0.01", "status": "FAILED",
             "metrics.train/loss": 9.0, "metrics.val/loss": np.nan},
        ]
    )  # fmt: skip
    a, b = (dict(zip(HEADERS, row, strict=True)) for row in arm_rows(runs))
    assert (a["optimizer"], a["lr"], a["warm-up"], a["steps"]) == ("adamw", "0.003", "auto", "10")
    assert (a["tokens/run"], a["params"]) == ("320", "1k")
    gaps = np.array([0.1, 0.3])
    assert a["gap (val − train)"] == f"{gaps.mean():.4f} ± {gaps.std(ddof=1):.4f}"
    assert a["final train/loss"] == f"{4.1:.4f} ± {np.std([4.0, 4.2], ddof=1):.4f}"
    # one finished seed: its gap alone, no spread; the failed seed counts in no loss
    assert (b["lr"], b["warm-up"], b["gap (val − train)"]) == ("0.01", "30", "-0.1000")


def test_the_forest_plot_draws_each_deciding_interval_and_the_sourced_size_on_its_side() -> None:
    worse = ArmComparison(arm="a", against="b", expect="worse", magnitude_bpb=[0.015, 0.02],
                          source="S 2020")  # fmt: skip
    better = ArmComparison(arm="c", against="b", expect="better", magnitude_bpb=0.05, source="T")
    equal = ArmComparison(arm="d", against="b", expect="equal")
    rows = [
        ForestRow("a vs b", Decided(0.01, -0.005, 0.025, "sequential"), worse, "too weak to tell"),
        ForestRow("c vs b", Decided(-0.06, -0.08, -0.04, "fixed"), better, "agrees"),
        ForestRow("d vs b", None, equal, "no interval"),
    ]
    fig = forest_figure(rows, margin=0.02, metric="val/bpb", maximize=False)
    ax = fig.axes[0]
    bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_height() == 0.5]
    # lower is better: a worsening is to the right of 0, an improvement to the left
    assert [(round(p.get_x(), 6), round(p.get_width(), 6)) for p in bars] == [
        (0.015, 0.005), (-0.05, 0.0005)
    ]  # fmt: skip
    (first, second) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert tuple(first.lines[0].get_xydata()[0]) == (0.01, 0)  # a row with an interval each
    bar = second.lines[2][0].get_segments()[0]  # the interval's horizontal line
    assert bar[0][0] == pytest.approx(-0.08) and bar[1][0] == pytest.approx(-0.04)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["margin ±0.02", "sourced magnitude", "too weak to tell", "agrees"]
    assert forest_figure(rows[2:], 0.02, "val/bpb", False) is None


def test_an_interval_far_wider_than_the_others_is_cut_at_their_range_with_its_numbers() -> None:
    equal = ArmComparison(arm="a", against="b", expect="equal")
    narrow = [Decided(-0.01 * k, -0.01 * k - 0.02, -0.01 * k + 0.02, "fixed") for k in range(3)]
    stalled = Decided(0.27, -0.77, 1.32, "sequential")  # a seed that stalled
    rows = [ForestRow(f"r{k}", d, equal, "too weak to tell") for k, d in enumerate(narrow)]
    rows.append(ForestRow("stalled", stalled, equal, "too weak to tell"))
    ax = forest_figure(rows, margin=0.015, metric="val/bpb", maximize=False).axes[0]
    low, high = ax.get_xlim()
    # the narrow rows set the range (-0.04 to 0.02, with room); the stalled row does not
    assert -0.05 < low < -0.04 and 0.02 < high < 0.03
    assert [t.get_text() for t in ax.texts] == ["Δ +0.2700 [-0.7700, +1.3200]"]
    arrows = [line.get_marker() for line in ax.lines if line.get_marker() in ("<", ">")]
    assert sorted(arrows) == ["<", ">"]  # it goes on past both edges
    # with every row as wide, none is cut
    rows[-1] = ForestRow("stalled", Decided(0.01, -0.02, 0.04, "fixed"), equal, "agrees")
    ax = forest_figure(rows, margin=0.015, metric="val/bpb", maximize=False).axes[0]
    assert len(ax.texts) == 0 and ax.get_xlim()[1] > 0.04


def _finding(
    axis: str, arm: str, stop: str | float, delta: float, agreement: str = "agrees"
) -> dict:
    return {"axis": axis, "arm": arm, "against": "base", "expect": "worse",
            "agreement": agreement, "sequential_stop": stop, "m_delta": delta}  # fmt: skip


@pytest.mark.parametrize(
    ("row", "answer"),
    [
        (_finding("x", "a", "difference", 0.05), "worse"),
        (_finding("x", "a", "difference", -0.05), "better"),
        (_finding("x", "a", "equivalent", 0.001), "equal"),
        (_finding("x", "a", "cap", 0.05), "undecided"),
        (_finding("x", "a", "open", 0.05), "undecided"),
        # no sequential design: the fixed-sample interval against zero
        (
            {**_finding("x", "a", math.nan, 0.05), "m_delta_low": 0.01, "m_delta_high": 0.09},
            "worse",
        ),
        (
            {**_finding("x", "a", math.nan, 0.05), "m_delta_low": -0.01, "m_delta_high": 0.09},
            "undecided",
        ),
    ],
)
def test_a_finding_s_outcome_is_what_its_test_decided(row: dict, answer: str) -> None:
    assert outcome(pd.Series(row), "m", maximize=False) == answer


def test_findings_hold_flip_or_change_decidedness() -> None:
    old = pd.DataFrame([
        _finding("x", "holds", "difference", 0.05),
        _finding("x", "flips", "difference", 0.05),
        _finding("x", "undecided", "difference", 0.05),
        _finding("x", "decided", "cap", 0.05),
        _finding("old-axis", "renamed", "equivalent", 0.0),
        _finding("x", "gone", "cap", 0.0),
    ])  # fmt: skip
    new = pd.DataFrame([
        _finding("x", "holds", "difference", 0.04),
        _finding("x", "flips", "difference", -0.04, "disagrees"),
        _finding("x", "undecided", "cap", 0.01, "too weak to tell"),
        _finding("x", "decided", "difference", 0.05),
        _finding("new-axis", "renamed", "equivalent", 0.0),
        _finding("x", "fresh", "equivalent", 0.0),
    ])  # fmt: skip
    table = compare_findings(old, new, {("flips", "base"): "a longer budget"}, "m", False)
    status = dict(zip(table["comparison"], table["status"], strict=True))
    assert status == {
        "holds vs base": "holds",
        "flips vs base": "flips",
        "undecided vs base": "now undecided",
        "decided vs base": "newly decided",
        "renamed vs base": "holds",
        "fresh vs base": "new comparison",
        "gone vs base": "not repeated",
    }
    flips = table.set_index("comparison").loc["flips vs base"]
    assert flips["previous"] == "worse (+0.050): agrees with worse"
    assert flips["now"] == "better (-0.040): disagrees with worse"
    assert flips["why"] == "a longer budget"


def test_the_previous_study_is_read_by_the_metric_it_reported() -> None:
    # the earlier study scored one corpus (`m`); this one a macro over domains (`m_macro`)
    old = pd.DataFrame([_finding("x", "held", "difference", 0.05)])
    new = pd.DataFrame([_finding("x", "held", "difference", 0.04)])
    new.columns = [c.replace("m_", "m_macro_") for c in new.columns]
    table = compare_findings(old, new, {}, "m_macro", False)
    assert table.loc[0, "previous"] == "worse (+0.050): agrees with worse"
    assert table.loc[0, "now"] == "worse (+0.040): agrees with worse"
    assert table.loc[0, "status"] == "holds"


def _trials(lr_param: str) -> pd.DataFrame:
    """Two blocks × 3 lrs × 2 warm-ups on one seed: each block's best warm-up differs by lr."""
    rows = []
    for block, offset in (("pre", 0.0), ("post", 0.5)):
        for lr, losses in ((1e-3, (3.0, 3.2)), (2e-3, (2.8, 2.5)), (4e-3, (3.4, 3.1))):
            for warmup, loss in zip((30, 90), losses, strict=True):
                rows.append({
                    "run_id": f"{block}{lr}{warmup}", "seed": 7, "status": "FINISHED",
                    "variant": f"block={block}", "start_time": len(rows),
                    f"params.{lr_param}": str(lr), "params.model.block": block,
                    "params.train.schedule.warmup": str(warmup),
                    "params.model.vocab_size": "2048", "metrics.val/loss": loss + offset,
                })  # fmt: skip
    return pd.DataFrame(rows)


def test_a_sensitivity_entry_s_x_and_by_choose_the_lr_and_the_arm() -> None:
    runs = _trials("train.optimizer.adamw_lr")
    # x: the lr is the param the entry names; by: an arm per block, the best warm-up at each lr
    found = lr_sensitivities(runs, 0.9, lr_param="train.optimizer.adamw_lr", by="model.block")
    assert [r.arm for r in found] == ["model.block=pre", "model.block=post"]
    pre = found[0]
    assert pre.final.tolist() == [[3.0, 2.5, 3.1]]
    assert pre.per_seed[0] == pytest.approx(np.mean([3.0, 2.5, 3.1]) - 2.5)
    # without `by`, the warm-ups are arms of their own, and the lr param must be named
    assert len(lr_sensitivities(runs, lr_param="train.optimizer.adamw_lr")) == 4
    assert lr_sensitivities(runs) == []
    headers, _ = sensitivity_rows(found)
    assert headers[1] == "lr sensitivity (nats) [90% CI]"


@pytest.mark.parametrize(
    ("expect", "calibration", "stopped", "step"),
    [
        ("better", False, False, True),  # Holm's step interval: its corrected p tests it
        ("equal", False, False, False),  # the simultaneous interval
        ("better", True, False, False),  # an A/A row: the simultaneous interval
        ("better", False, True, False),  # the sequential design's repeated interval
    ],
)
def test_only_holm_s_step_interval_decides_beside_a_p_value(
    expect: str, calibration: bool, stopped: bool, step: bool
) -> None:
    row = pd.Series({
        "m_delta": -0.05, "m_delta_low": -0.08, "m_delta_high": -0.02, "m_delta_level": 0.975,
        "m_delta_method": "paired t", "m_delta_low_simultaneous": -0.09,
        "m_delta_high_simultaneous": -0.01,
    })  # fmt: skip
    finding = Finding(
        ArmComparison(arm="a", against="b", expect=expect), "a", "b", row, "agrees",
        calibration=calibration,
        standing=Standing("difference", 1, 3, [(0, 0)], -0.1, -0.01, 0.02) if stopped else None,
    )  # fmt: skip
    decided = deciding_interval(finding, "m", comparisons=2)
    assert decided is not None and decided.step == step
    bounds = {True: (-0.08, -0.02), False: (-0.09, -0.01)}[step]
    assert (decided.low, decided.high) == ((-0.1, -0.01) if stopped else bounds)
