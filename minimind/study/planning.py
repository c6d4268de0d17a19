"""`minimind study plan MANIFEST`: before (or between) training, what each comparison needs.

Per comparison: the seeds that settle it at the manifest's `planning.power` (80 % unless set):
a `better`/`worse` comparison detects `planning.effect`; an `equal` one (and an A/A calibration
row) settles equivalence within the study's margin (TOST power); Holm's first step, alpha over the
axis's comparisons (`minimind.stats.power`). The noise is the stated `planning.sd` or the sd of
the comparison's per-seed differences measured from its runs so far, with the range its
chi-square interval implies. A comparison needing more seeds than the sequential design's cap is
flagged: the cap cannot settle it. Then, from the runs so far, where each comparison stands in the
sequential design (`minimind.stats.sequential`) and the seeds the next look needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from minimind.compare import CompareError, RunSet
from minimind.record import is_maximized
from minimind.stats.power import ALPHA, SeedsPlan, plan_seeds
from minimind.stats.sequential import Decisions, Standing, decide
from minimind.study.analysis import (
    Agreement,
    AxisResult,
    Finding,
    StudyError,
    arm_runs,
    load_experiments,
    plan_finding,
    rules_out_source,
)
from minimind.study.manifest import ArmComparison, Axis, Expectation, Study


@dataclass(frozen=True)
class PlannedComparison:
    axis: str
    comparison: ArmComparison
    calibration: bool
    differences: np.ndarray
    """The per-seed differences so far, arm − against, in seed order (an A/A row pairs the i-th
    seed of one side with the i-th of the other: independent runs, fixed in advance)."""
    pairs: list[tuple[int, int]]
    """The seeds of each difference: (the arm's, the reference's), equal but in an A/A row."""
    plan: SeedsPlan | None
    """None: no sd stated and fewer than 2 differences to measure one."""


def arm_values(study: Study, key: str, runsets: dict[str, RunSet]) -> pd.Series:
    """The arm's metric per seed, from the newest finished run of each seed."""
    runs = arm_runs(key, study.arms[key], runsets[study.arms[key].experiment])
    runs = runs[runs["status"] == "FINISHED"]
    return runs.set_index("seed")[f"metrics.{study.metric}"].dropna().sort_index()


def differences(
    study: Study, comparison: ArmComparison, runsets: dict[str, RunSet]
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The per-seed differences arm − against and the seeds of each (`PlannedComparison`)."""
    arm, against = (arm_values(study, k, runsets) for k in (comparison.arm, comparison.against))
    if study.is_self_comparison(comparison):
        n = min(len(arm), len(against))
        pairs = list(zip(arm.index[:n].astype(int), against.index[:n].astype(int), strict=True))
        return arm.to_numpy()[:n] - against.to_numpy()[:n], pairs
    common = arm.index.intersection(against.index).sort_values()
    return (arm[common] - against[common]).to_numpy(), [(int(s), int(s)) for s in common]


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
        study.equivalence_margin if equal else study.planned_difference(),
        sd,
        df=df,
        comparisons=len(axis.comparisons),
        power=planning.power if planning is not None else 0.8,
    )


def plan_study(study: Study, tracking_uri: str | None) -> list[PlannedComparison]:
    """Every comparison's plan, from the runs in `tracking_uri` so far (none: stated sd only)."""
    try:
        runsets = load_experiments(study, tracking_uri) if tracking_uri else None
    except StudyError:
        raise  # runs that cannot be read as the manifest says (a tuning seed unstated)
    except CompareError:
        runsets = None  # nothing trained yet
    return plan_from_runs(study, runsets)


def plan_from_runs(study: Study, runsets: dict[str, RunSet] | None) -> list[PlannedComparison]:
    """Every comparison's plan from the runs of `load_experiments` (None: none yet)."""
    planned = []
    for axis in study.axes:
        for c in axis.comparisons:
            d, pairs = np.array([]), list[tuple[int, int]]()
            if runsets is not None:
                try:
                    d, pairs = differences(study, c, runsets)
                except CompareError:
                    pass  # an arm without runs yet
            plan = plan_comparison(study, axis, c, d)
            planned.append(PlannedComparison(axis.name, c, study.is_calibration(c), d, pairs, plan))
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


def with_standings(
    study: Study, results: list[AxisResult], runsets: dict[str, RunSet]
) -> list[AxisResult]:
    """`results` with each finding's `Standing` in the sequential design, replayed over the
    evaluation runs `analysis.analyse` compared (the report's look, seeds and why), and its
    agreement the design's (`sequential_agreement`): a fixed-sample test over every seed so far
    would spend the error rate again at each look."""
    standing = standings(study, plan_from_runs(study, runsets))
    maximize = is_maximized(study.metric)

    def attach(r: AxisResult, f: Finding) -> Finding:
        s = standing[r.axis.name, f.comparison.arm]
        verdict = sequential_agreement(f.comparison, s, maximize)
        plan = None
        if verdict == "too weak to tell":  # what would settle it
            plan = f.plan or plan_finding(
                r.comparison, f.arm, f.against, f.comparison.expect, study
            )
        return replace(f, standing=s, agreement=verdict, plan=plan)

    return [replace(r, findings=[attach(r, f) for f in r.findings]) for r in results]


def sequential_agreement(
    expect: Expectation | ArmComparison, standing: Standing, maximize: bool
) -> Agreement:
    """The agreement of where a comparison stopped with `expect`. Open, or at the cap: too weak
    to tell. Stopped on a difference: `better`/`worse` agree when its direction is theirs;
    `equal` disagrees when the interval lies wholly outside the margin and is too weak to tell
    otherwise (a difference smaller than the margin is still equal). Stopped on equivalence:
    `equal` agrees; `better`/`worse` disagree only when the interval lies wholly on the other side
    of zero, or (given the whole `ArmComparison`) when it rules out the sourced magnitude
    (`rules_out_source`), and are too weak to tell otherwise: an interval within the margin
    still allows a change in their direction smaller than the margin, which the literature may
    expect."""
    comparison = expect if isinstance(expect, ArmComparison) else None
    expect = expect.expect if isinstance(expect, ArmComparison) else expect
    if standing.stop == "equivalent" and expect == "equal":
        return "agrees"
    if standing.stop in ("equivalent", "cap") and comparison is not None:
        if rules_out_source(comparison, standing.low, standing.high, maximize):
            return "disagrees"
    if standing.stop == "equivalent":
        against = standing.low > 0 if (expect == "better") != maximize else standing.high < 0
        return "disagrees" if against else "too weak to tell"
    if standing.stop != "difference":
        return "too weak to tell"
    if expect == "equal":
        outside = standing.low > standing.margin or standing.high < -standing.margin
        return "disagrees" if outside else "too weak to tell"
    improved = (standing.low > 0) == maximize
    return "agrees" if improved == (expect == "better") else "disagrees"


def describe_study_plan(study: Study, planned: list[PlannedComparison]) -> str:
    """The `study plan` text: per axis and comparison, the seeds needed, the cap's warning, and where
    the sequential design stands."""
    cap = study.sequential.looks[-1]
    standing = standings(study, planned)
    lines = [
        f"study {study.name}: seeds at {100 * (study.planning.power if study.planning else 0.8):g}%"
        f" power; sequential looks at {', '.join(map(str, study.sequential.looks))} seeds "
        f"({study.sequential.spending.replace('_', '-')}-type alpha spending, Holm per axis)"
    ]
    for axis in study.axes:
        lines.append(f"{axis.name}:")
        for p in (p for p in planned if p.axis == axis.name):
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
            lines.append(f"    {standing[axis.name, c.arm].sentence()}")
    return "\n".join(lines)


def standings(study: Study, planned: list[PlannedComparison]) -> dict[tuple[str, str], Standing]:
    """Every comparison's `Standing`, by (axis name, arm key)."""
    decisions = sequential_decisions(study, planned)
    looks = study.sequential.looks
    out = {}
    for axis in study.axes:
        rows = [p for p in planned if p.axis == axis.name]
        outcome = decisions[axis.name]
        for j, p in enumerate(rows):
            stop, look = outcome.stop[0, j], int(outcome.look[0, j])
            used = p.pairs if stop == "open" else p.pairs[: looks[look]]
            d = p.differences[: len(used)]
            out[axis.name, p.comparison.arm] = Standing(
                stop, look + 1, looks[look], used, float(outcome.low[0, j]),
                float(outcome.high[0, j]), study.equivalence_margin,
                float(d.mean()) if len(d) else math.nan,
            )  # fmt: skip
    return out
