"""Decisions across scale (`study.scale_agreement`): synthetic runs at a smaller size and at a
larger one with a budget branch, whose decisions are known by construction."""

from __future__ import annotations

import copy
import math
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
from minimind.spec.errors import SpecError
from minimind.stats.agreement import bootstrap_agreement
from minimind.study.analysis import analyse
from minimind.study.manifest import Study
from minimind.study.scale_agreement import (
    MISSING,
    SHORTER,
    SMALLER,
    check_scale_of,
    clopper_pearson,
    scale_agreement,
    scale_blocks,
)

T0 = 1_700_000_000_000
SEEDS = (0, 1, 2, 3)
JITTER = (0.001, -0.001, 0.0005, -0.0005)  # per seed: mean 0, far below the effects
FULL, BRANCH = 20, 10
SCALE_OF = {"base_S": "base_L", "up_S": "up_L", "down_S": "down_L", "lonely_S": "lonely_L"}
BETTER, WORSE, SAME = -0.1, 0.1, 0.0  # val/bpb: lower is better


def _arm(label: str, variant: str) -> dict[str, str]:
    return {"label": label, "experiment": "arms", "variant": variant}


def _axis(name: str, arms: list[str], against: str) -> dict[str, object]:
    return {
        "name": name,
        "title": name,
        "expected": "",
        "references": ["Somebody 2020"],
        "comparisons": [{"arm": a, "against": against, "expect": "better"} for a in arms],
    }


MANIFEST = {
    "name": "scales",
    "title": "Two sizes",
    "metric": "val/bpb",
    "equivalence_margin": 0.02,
    "streams": [["minimind run a.yaml"]],
    "arms": {
        **{f"{k}_S": _arm(f"{k} S", f"{k}_S") for k in ("base", "up", "down", "lonely")},
        # the larger arms by params, as a sweep's tuned arms are: their budget branches are
        # found by the variant their runs carry
        **{
            f"{k}_L": {
                "label": f"{k} L",
                "experiment": "arms",
                "where": {"model.tag": f"{k}_L", "train.steps": FULL},
            }
            for k in ("base", "up", "down", "extra", "lonely")
        },
    },
    "axes": [
        _axis("mlp_S", ["up_S", "down_S", "lonely_S"], "base_S"),
        _axis("mlp_L", ["up_L", "down_L", "extra_L"], "base_L"),
    ],
}


def _write(
    uri: str, small: dict[str, float], large: dict[str, float], branch: dict[str, float]
) -> None:
    """Each arm's effect on val/bpb against its baseline (2.0 + 0.01 seed), plus `JITTER`: at
    the smaller size (`small`), the larger's full budget (`large`) and its branch (`branch`;
    an arm missing from it has no branch runs)."""
    client = MlflowClient(uri)
    exp = client.create_experiment("arms")
    parent = log_parent(client, exp, "arms", T0)
    start = T0
    cells = [(f"{k}_S", e, None) for k, e in small.items()]
    cells += [(f"{k}_L", e, FULL) for k, e in large.items()]
    cells += [(f"{k}_L", e, BRANCH) for k, e in branch.items()]
    for name, effect, budget in cells:
        for seed in SEEDS:
            start += 1000
            value = (
                2.0 + 0.01 * seed + effect + (JITTER[seed] if effect or name[:4] != "base" else 0)
            )
            variant = name if budget is None else f"budget={budget},{name}"
            tags = {} if budget is None else {"budget": str(budget), "arm": name}
            log_child(
                client, exp, parent, variant, seed, start,
                params={"train.steps": str(budget or 30), "model.tag": name},
                metrics=[Metric("val/bpb", value, start, 10)], tags=tags,
            )  # fmt: skip


def _table(uri: str, scale_of: dict[str, str] = SCALE_OF) -> pd.DataFrame:
    study = Study.model_validate(MANIFEST)
    axes, _, runsets = analyse(study, uri)
    return scale_agreement(study, axes, runsets, scale_of, resamples=500)


def _decisions(table: pd.DataFrame, point: str) -> dict[str, tuple[str, str, object]]:
    rows = table[(table["kind"] == "decision") & (table["point"] == point)]
    return {
        r["arm"]: (r["decision"], r["reference_decision"], r["agrees"]) for _, r in rows.iterrows()
    }


def _overall(table: pd.DataFrame, point: str) -> pd.Series:
    return table[(table["kind"] == "overall") & (table["point"] == point)].iloc[0]


AGREEING = {"base": SAME, "up": BETTER, "down": WORSE, "lonely": 2 * WORSE}
LARGE = {"base": SAME, "up": BETTER, "down": WORSE, "extra": SAME, "lonely": 2 * WORSE}


def test_every_decision_agrees(mlflow_uri: str) -> None:
    _write(mlflow_uri, AGREEING, LARGE, {k: v for k, v in LARGE.items() if k != "lonely"})
    table = _table(mlflow_uri)
    for point in (SMALLER, SHORTER):
        made = _decisions(table, point)
        assert made["up_L"] == ("better", "better", True)
        assert made["down_L"] == ("worse", "worse", True)
        overall = _overall(table, point)
        assert (overall["agreeing"], overall["compared"], overall["share"]) == (2, 2, 1.0)
        assert overall["share_low"] == pytest.approx(stats.beta.ppf(0.025, 2, 1))
        assert overall["share_high"] == 1.0
        assert overall["ranking"] == 1.0
    assert _overall(table, SHORTER)["budget"] == BRANCH


def test_no_decision_agrees(mlflow_uri: str) -> None:
    flipped = {**AGREEING, "up": WORSE, "down": BETTER}
    _write(mlflow_uri, flipped, LARGE, {**flipped, "extra": SAME})
    table = _table(mlflow_uri)
    for point in (SMALLER, SHORTER):
        made = _decisions(table, point)
        assert made["up_L"] == ("worse", "better", False)
        assert made["down_L"] == ("better", "worse", False)
        overall = _overall(table, point)
        assert (overall["agreeing"], overall["compared"], overall["share"]) == (0, 2, 0.0)
        assert (overall["share_low"], overall["share_high"]) == pytest.approx(
            (0.0, stats.beta.ppf(0.975, 1, 2))
        )


def test_a_flipped_comparison_and_the_ranking_agreement(mlflow_uri: str) -> None:
    """down is better at the smaller size, worse at the larger, within noise at its branch."""
    small = {**AGREEING, "down": BETTER}
    branch = {**LARGE, "down": SAME}
    del branch["lonely"]
    _write(mlflow_uri, small, LARGE, branch)
    table = _table(mlflow_uri)
    assert _decisions(table, SMALLER)["down_L"] == ("better", "worse", False)
    assert _decisions(table, SMALLER)["up_L"] == ("better", "better", True)
    assert _decisions(table, SHORTER)["down_L"] == ("within noise", "worse", False)
    for point in (SMALLER, SHORTER):
        assert (_overall(table, point)["agreeing"], _overall(table, point)["compared"]) == (1, 2)

    def values(effects: dict[str, float], arms: list[str]) -> np.ndarray:
        # [seeds, arms] as `_write` writes them (the arms ranked: the paired ones)
        return np.array(
            [[2.0 + 0.01 * s + effects[a] + (JITTER[s] if effects[a] or a != "base" else 0)
              for a in arms] for s in SEEDS]
        )  # fmt: skip

    paired = ["base", "up", "down", "lonely"]
    expected = bootstrap_agreement(values(small, paired), values(LARGE, paired), resamples=500)
    overall = _overall(table, SMALLER)
    assert (overall["ranking"], overall["ranking_low"], overall["ranking_high"]) == expected
    assert (overall["seeds"], overall["arms"]) == (4, 4)
    # at the branch, lonely has no runs: the other three are ranked
    three = paired[:3]
    expected = bootstrap_agreement(values(branch, three), values(LARGE, three), resamples=500)
    overall = _overall(table, SHORTER)
    assert (overall["ranking"], overall["ranking_low"], overall["ranking_high"]) == expected
    assert overall["arms"] == 3


def test_a_comparison_at_one_size_only_is_named_and_not_counted(mlflow_uri: str) -> None:
    _write(mlflow_uri, AGREEING, LARGE, {k: v for k, v in LARGE.items() if k != "lonely"})
    table = _table(mlflow_uri)
    small = table[(table["kind"] == "decision") & (table["point"] == SMALLER)].set_index("arm")
    # extra L is compared at the larger size only, lonely S at the smaller only
    assert small.loc["extra_L", "decision"] == MISSING
    assert (
        small.loc["extra_L", "note"]
        == "no comparison of extra_L against base_L at the smaller size"
    )
    assert small.loc["lonely_L", "reference_decision"] == MISSING
    assert small.loc["lonely_L", "comparison"] == "lonely S vs base S"
    assert small.loc["lonely_L", "note"] == (
        "no comparison of lonely_L against base_L at the larger size"
    )
    assert not small.loc["extra_L", "counted"] and not small.loc["lonely_L", "counted"]
    # at the branch, extra L is decided at both points but has no smaller counterpart
    branch = table[(table["kind"] == "decision") & (table["point"] == SHORTER)].set_index("arm")
    assert branch.loc["extra_L", "agrees"] and not branch.loc["extra_L", "counted"]
    assert _overall(table, SHORTER)["compared"] == 2

    markdown = "\n".join(b.markdown() for b in scale_blocks(table, "S", "L"))
    assert "| up L vs base L | better | yes | better | yes | better |" in markdown
    assert "| extra L vs base L | - |  | within noise | yes | within noise |" in markdown
    assert "| S | 2 of 2 |" in markdown
    assert "| L at 10 steps | 2 of 2 |" in markdown
    assert (
        "- extra L vs base L (S): no comparison of extra_L against base_L at the smaller size"
        in markdown
    )
    assert (
        "- lonely S vs base S (S): no comparison of lonely_L against base_L at the larger size"
        in markdown
    )


def test_a_larger_axis_without_branch_runs_is_named(mlflow_uri: str) -> None:
    """A budget some arm of an axis lacks: that axis's comparisons are missing there, the
    arm named."""
    branch = {k: v for k, v in LARGE.items() if k not in ("lonely", "extra")}
    _write(mlflow_uri, AGREEING, LARGE, branch)
    table = _table(mlflow_uri)
    rows = table[(table["kind"] == "decision") & (table["point"] == SHORTER)].set_index("arm")
    assert set(rows["decision"]) == {MISSING}
    assert rows.loc["up_L", "note"].startswith(
        "arms.extra_L: no run of variant 'budget=10,extra_L'"
    )
    assert _overall(table, SHORTER)["compared"] == 0
    assert math.isnan(_overall(table, SHORTER)["share_low"])


@pytest.mark.parametrize(
    ("scale_of", "message"),
    [
        ({"up_S": "up_l"}, "arms.up_S.scale_of: unknown arm 'up_l'; arms: "),
        ({"up_S": "up_S"}, "arms.up_S.scale_of: an arm is not its own larger size"),
        ({"up_S": "down_S", "down_S": "down_L"}, "arms.up_S.scale_of: down_S has a scale_of of its own"),
        ({"up_S": "up_L", "down_S": "up_L"}, "arms.down_S.scale_of: up_L is the larger size of up_S already"),
        ({"up_S": "up_L"}, "axes[0].comparisons[0]: up_S has a scale_of and base_S none"),
    ],
)  # fmt: skip
def test_a_bad_pairing_is_one_line_naming_its_field(scale_of: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        check_scale_of(Study.model_validate(MANIFEST), scale_of)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_no_pairing_is_no_table() -> None:
    study = Study.model_validate(MANIFEST)
    assert scale_agreement(study, [], {}, {}).empty
    assert scale_blocks(scale_agreement(study, [], {}, {})) == []


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_clopper_pearson_is_the_beta_quantiles(level: float) -> None:
    """Against the beta quantiles (Clopper & Pearson 1934): low = B(a/2; k, n-k+1), high =
    B(1-a/2; k+1, n-k), 0 at k = 0 and 1 at k = n; every k of n = 1..12."""
    tail = (1 - level) / 2
    for n in range(1, 13):
        for k in range(n + 1):
            low = 0.0 if k == 0 else stats.beta.ppf(tail, k, n - k + 1)
            high = 1.0 if k == n else stats.beta.ppf(1 - tail, k + 1, n - k)
            assert clopper_pearson(k, n, level) == pytest.approx((low, high), abs=1e-12)
    assert clopper_pearson(0, 1, 0.95) == pytest.approx((0.0, 0.975))
    assert all(math.isnan(v) for v in clopper_pearson(0, 0))


def _paired_manifest(tmp_path: Path, scale_of: dict[str, str]) -> Path:
    manifest = copy.deepcopy(MANIFEST)
    for key, larger in scale_of.items():
        manifest["arms"][key]["scale_of"] = larger  # type: ignore[index]
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return path


def test_the_manifest_pairs_the_sizes_and_the_report_shows_their_decisions(
    mlflow_uri: str, tmp_path: Path
) -> None:
    _write(mlflow_uri, AGREEING, LARGE, {k: v for k, v in LARGE.items() if k != "lonely"})
    path = _paired_manifest(tmp_path, SCALE_OF)
    folder = tmp_path / "report"
    argv = ["study", "report", str(path), "--tracking-uri", mlflow_uri, "--report-dir"]
    assert main([*argv, str(folder)]) == 0
    table = pd.read_csv(folder / "scale_agreement.csv")
    assert _overall(table, SMALLER)["agreeing"] == _overall(_table(mlflow_uri), SMALLER)["agreeing"]
    assert "Decisions across scale" in (folder / "index.html").read_text(encoding="utf-8")


def test_a_bad_pairing_in_the_manifest_exits_2_naming_its_field(tmp_path: Path, capsys) -> None:
    path = _paired_manifest(tmp_path, {"up_S": "up_l"})
    assert main(["study", "plan", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "arms.up_S.scale_of: unknown arm 'up_l'" in err, err
    assert "\n" not in err
