"""The study report's decision agreement (under each ladder) and lr sensitivity (under each
axis whose `sensitivity:` names a sweep), recomputed here from the runs' values."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml
from fake_ladder import RUNG_FLOPS, RUNG_STEPS, TOKENS_PER_STEP, write_ladder
from fake_lr_grid import LOSS, write_lr_grid
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric
from scipy import stats

from minimind.cli import main
from minimind.compare import load_runs
from minimind.compare.ladder import compare_ladder

T0 = 1_600_000_000_000
FINAL = {"base": (2.50, 2.52, 2.54), "good": (2.40, 2.41, 2.42)}
TUNING_SEEDS = [10, 11, 12]
MANIFEST = {
    "name": "decisions",
    "title": "A study with a ladder and a tuned axis",
    "equivalence_margin": 0.02,
    "tuning_seeds": TUNING_SEEDS,
    "streams": [["minimind run a.yaml"]],
    "arms": {
        "base": {"label": "baseline", "experiment": "arms", "variant": "base"},
        "good": {"label": "good", "experiment": "arms", "variant": "good"},
    },
    "axes": [
        {
            "name": "norm",
            "title": "Norm",
            "expected": "good better",
            "references": ["Somebody 2020"],
            "comparisons": [{"arm": "good", "against": "base", "expect": "better"}],
            "sensitivity": [{"experiment": "lrs", "x": "train.optimizer.lr", "by": "model.norm"}],
        }
    ],
    "ladders": [{"experiment": "lad", "title": "Two arms at four sizes", "extrapolate": 4}],
}


def _write_arms(uri: str) -> None:
    client = MlflowClient(uri)
    exp = client.create_experiment("arms")
    parent = log_parent(client, exp, "arms", T0)
    start = T0
    for variant, finals in FINAL.items():
        for seed, final in enumerate(finals):
            start += 1000
            log_child(
                client, exp, parent, variant, seed, start,
                params={"train.steps": "10", "train.batch_size": "4", "train.seq_len": "8",
                        "flops_per_token": "1000", "num_params": "1000"},
                metrics=[Metric("val/bpb", final, start, 10),
                         Metric("val/bpb_sampled", final, start, 10)],
            )  # fmt: skip


def _report(tmp_path: Path, uri: str) -> str:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(MANIFEST, sort_keys=False))
    folder = tmp_path / "report"
    argv = ["study", "report", str(path), "--tracking-uri", uri, "--report-dir", str(folder)]
    assert main(argv) == 0
    return (folder / "report.md").read_text()


def test_the_study_report_has_decision_agreement_and_lr_sensitivity(
    mlflow_uri: str, tmp_path: Path
) -> None:
    # the variant worse at the two small rungs (0.5x compute), better at the two large (2x)
    small = RUNG_STEPS["r1"] * TOKENS_PER_STEP * RUNG_FLOPS["r1"]
    write_ladder(mlflow_uri, lambda c: np.where(np.asarray(c) <= small, 0.5, 2.0))
    _write_arms(mlflow_uri)
    write_lr_grid(mlflow_uri, seeds=tuple(TUNING_SEEDS), trials=True)
    report = _report(tmp_path, mlflow_uri)

    section = report[report.index("#### Decision agreement") :]
    ladder = compare_ladder(load_runs(mlflow_uri, ["lad"]))
    means = {
        arm: ladder.arms[arm].points.groupby("rung")["value"].mean()
        for arm in ("arm=base", "arm=fast")
    }
    base, fast = means["arm=base"], means["arm=fast"]
    for rung in RUNG_STEPS:  # one pair of arms: 1 when ordered as at r3, else 0, every seed alike
        same = (fast[rung] < base[rung]) == (fast["r3"] < base["r3"])
        share = "1" if same else "0"
        assert f"| {rung} | {share} [{share}, {share}] | 3 | 2 |" in section
    for rung, made in (("r0", "worse"), ("r1", "worse"), ("r2", "better"), ("r3", "better")):
        agrees = "yes" if made == "better" else "no"
        assert f"| arm=fast vs arm=base | {rung} | {made} | better | {agrees} |" in section

    axis = report[report.index("## Norm") : report.index("## At more than one scale")]
    initial = math.log(2048)
    for arm in LOSS:
        per_seed = []
        for k in range(3):  # Wortsman et al.: mean of min(loss, initial) - the best, per seed
            capped = [min(initial if v[k] is None else v[k], initial) for v in LOSS[arm].values()]
            per_seed.append(sum(capped) / 3 - min(capped))
        mean, sd = float(np.mean(per_seed)), float(np.std(per_seed, ddof=1))
        half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
        row = f"| lrs: model.{arm} | {mean:.4g} [{mean - half:.4g}, {mean + half:.4g}] | 3 |"
        assert row in axis
    # the runs' own provenance beside the report machine's (none recorded by these runs)
    assert "- **git tree dirty (as the runs recorded it)**: not recorded" in report
