"""`minimind study MANIFEST --plan`: before (or between) training, what each comparison needs.

Per comparison: the seeds that settle it at the manifest's `planning.power` (80 % unless set):
a `better`/`worse` comparison detects `planning.effect`; an `equal` one (and an A/A calibration
row) settles equivalence within the study's margin (TOST power); Holm's first step, alpha over the
axis's comparisons (`minimind.compare.power`). The noise is the stated `planning.sd` or the sd of
the comparison's per-seed differences measured from its runs so far, with the range its
chi-square interval implies. A comparison needing more seeds than the sequential design's cap is
flagged: the cap cannot settle it. Then, from the runs so far, where each comparison stands in the
sequential design (`minimind.study.sequential`) and the seeds the next look needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from minimind.compare import CompareError, RunSet, load_runs
from minimind.compare.power import ALPHA, SeedsPlan, plan_seeds
from minimind.study.analysis import arm_runs, load_experiments
from minimind.study.manifest import ArmComparison, Axis, Study
from minimind.study.sequential import Decisions, decide


@dataclass(frozen=True)
class PlannedComparison:
    axis: str
    comparison: ArmComparison
    calibration: bool
    differences: np.ndarray
    """The per-seed differences so far, arm − against, in seed order (an A/A row pairs the i-th
    seed of one side with the i-th of the other: independent runs, fixed in advance)."""
    plan: SeedsPlan | None
    """None: no sd stated and fewer than 2 differences to measure one."""


def every_invocation(study: Study, tracking_uri: str) -> dict[str, RunSet]:
    """Each experiment's runs: of every invocation for experiments whose arms name a variant (so
    that a look's new seeds, trained by another invocation, join the earlier ones), of the latest
    for those chosen by params (a sweep's experiment, whose trials share its params)."""
    latest = load_experiments(study, tracking_uri)
    by_variant = {arm.experiment for arm in study.arms.values() if arm.variant is not None}
    by_params = {arm.experiment for arm in study.arms.values() if arm.variant is None}
    return {
        name: load_runs(tracking_uri, [name], all_runs=True)
        if name in by_variant and name not in by_params
        else runset
        for name, runset in latest.items()
    }


def arm_values(study: Study, key: str, runsets: dict[str, RunSet]) -> pd.Series:
    """The arm's metric per seed, from the newest finished run of each seed."""
    runs = arm_runs(key, study.arms[key], runsets[study.arms[key].experiment])
    runs = runs[runs["status"] == "FINISHED"].sort_values("start_time")
    return runs.groupby("seed")[f"metrics.{study.metric}"].last().dropna().sort_index()


def differences(study: Study, comparison: ArmComparison, runsets: dict[str, RunSet]) -> np.ndarray:
    arm, against = (arm_values(study, k, runsets) for k in (comparison.arm, comparison.against))
    if study.is_calibration(comparison):
        n = min(len(arm), len(against))
        return arm.to_numpy()[:n] - against.to_numpy()[:n]
    common = arm.index.intersection(against.index)
    return (arm[common] - against[common]).to_numpy()


def plan_comparison(study: Study, axis: Axis, c: ArmComparison, d: np.ndarray) -> SeedsPlan | None:
    planning = study.planning
    stated = planning.sd if planning is not None else None
    if stated is None and len(d) < 2:
        return None
    sd, df = (stated, None) if stated is not None else (float(np.std(d, ddof=1)), len(d) - 1)
    if not sd > 0:
        return None
    calibration = study.is_calibration(c)
    equal = c.expect == "equal" or calibration
    if not equal and planning is None:
        return None
    return plan_seeds(
        "equivalence" if equal else "difference",
        study.equivalence_margin if equal else planning.effect,  # type: ignore[union-attr]
        sd,
        df=df,
        comparisons=len(axis.comparisons),
        power=planning.power if planning is not None else 0.8,
    )


def plan_study(study: Study, tracking_uri: str | None) -> list[PlannedComparison]:
    """Every comparison's plan, from the runs in `tracking_uri` so far (none: stated sd only)."""
    try:
        runsets = every_invocation(study, tracking_uri) if tracking_uri else None
    except CompareError:
        runsets = None  # nothing trained yet
    planned = []
    for axis in study.axes:
        for c in axis.comparisons:
            try:
                d = differences(study, c, runsets) if runsets is not None else np.array([])
            except CompareError:
                d = np.array([])
            plan = plan_comparison(study, axis, c, d)
            planned.append(PlannedComparison(axis.name, c, study.is_calibration(c), d, plan))
    return planned


def sequential_decisions(study: Study, planned: list[PlannedComparison]) -> dict[str, Decisions]:
    """Per axis, the sequential design replayed over the differences so far (one family)."""
    design = study.sequential.design(ALPHA)
    decisions = {}
    for axis in study.axes:
        rows = [p for p in planned if p.axis == axis.name]
        table = np.full((1, len(rows), design.cap), np.nan)
        for j, p in enumerate(rows):
            table[0, j, : min(len(p.differences), design.cap)] = p.differences[: design.cap]
        decisions[axis.name] = decide(table, design, study.equivalence_margin)
    return decisions


def describe_study_plan(study: Study, planned: list[PlannedComparison]) -> str:
    """The `--plan` text: per axis and comparison, the seeds needed, the cap's warning, and where
    the sequential design stands."""
    cap = study.sequential.looks[-1]
    decisions = sequential_decisions(study, planned)
    lines = [
        f"study {study.name}: seeds at {100 * (study.planning.power if study.planning else 0.8):g}%"
        f" power; sequential looks at {', '.join(map(str, study.sequential.looks))} seeds "
        f"({study.sequential.spending.replace('_', '-')}-type alpha spending, Holm per axis)"
    ]
    for axis in study.axes:
        lines.append(f"{axis.name}:")
        rows = [p for p in planned if p.axis == axis.name]
        outcome = decisions[axis.name]
        for j, p in enumerate(rows):
            c = p.comparison
            name = f"{c.arm} vs {c.against}" + (" (A/A calibration)" if p.calibration else "")
            lines.append(f"  {name}, expect {c.expect}:")
            if p.plan is None:
                lines.append(
                    "    no plan: state planning.sd, or train 2 seeds of both arms"
                    + ("" if c.expect == "equal" or study.planning else "; and planning.effect")
                )
            else:
                lines.append(f"    {p.plan.sentence()}")
                if p.plan.seeds is None or p.plan.seeds > cap:
                    lines.append(f"    warning: the cap of {cap} seeds cannot settle it")
            lines.append(f"    {_standing(study, outcome, j, len(p.differences))}")
    return "\n".join(lines)


def _standing(study: Study, outcome: Decisions, j: int, trained: int) -> str:
    stop, look = outcome.stop[0, j], int(outcome.look[0, j])
    looks = study.sequential.looks
    if stop == "open":
        return (
            f"open after {trained} paired seed(s): train both arms to {looks[look]} seeds for "
            f"look {look + 1}"
        )
    interval = f"[{outcome.low[0, j]:+.4g}, {outcome.high[0, j]:+.4g}]"
    why = {
        "difference": f"a difference, interval {interval}",
        "equivalent": f"equivalent within ±{study.equivalence_margin:g}, interval {interval}",
        "cap": f"undecided at the cap, interval {interval}",
    }[stop]
    return f"stopped at look {look + 1} ({looks[look]} seeds): {why}"
