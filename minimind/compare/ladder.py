"""A ladder's comparison: the runs of a spec with `ladder:`, tagged `rung` and `arm`
(`minimind.record.ladder_tags`), compared point by point and across the points.

A point is a rung, or, when the rung's runs are budget branches (tagged `budget`,
`minimind.run.branches`), a (rung, budget) pair: a ladder at fixed tokens per parameter with
several budgets per rung has a point per size and budget, and everything below reads every
point (the fits, the trend, the decisions). The points are ordered by rung (by compute) and
then by budget, so the last one, the largest rung's longest budget, is the top.

    ladder = compare_ladder(load_runs(uri, ["ladder"]), CompareOptions(metric="val/bpb"))

- Per point, the usual comparison (`table.compare`) of the point's arms against the baseline
  arm of the same point: deltas with their intervals and the compute multiplier, as for any spec.
- Per arm, its final objective against its training compute fitted by L(C) = E + A·C^(−α) over
  every point, each seed's ladder on its own, with t intervals over seeds (`scaling.fit_arm`).
- Per comparison, `scaling.compare_on_ladder`: the exponent difference, the multiplier
  extrapolated to a multiple of the top rung's compute (with its simulated coverage, which
  decides whether it is reported), the trend of the per-rung paired difference with compute (a
  t-test over seeds of its slope on log compute) and the crossing of the two laws; beside it
  the single-scale decision at each point (DataDecide's baseline: what the ranking at one size
  says) and whether it agrees with the top point's. docs/statistics.md, "Ladders".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import cast

import numpy as np
import pandas as pd

from minimind.compare.runs import CompareError, RunSet
from minimind.compare.table import (
    CompareOptions,
    Comparison,
    compare,
    compute_per_step,
    tokens_per_step,
)
from minimind.foundations.extrapolation import DEFAULT_EXTRAPOLATION
from minimind.record import ARM_TAG, BUDGET_TAG, RUNG_TAG, is_maximized
from minimind.stats.scaling import (
    ArmFit,
    LadderComparison,
    compare_on_ladder,
    fit_arm,
    holm_trends,
)


@dataclass(frozen=True)
class Rung:
    """One point of the ladder: its `name` (the rung's, or `<rung>@<budget>` for a budget
    branch), the rung's name, its budget in steps (None when the runs are not branches), the
    baseline arm's parameters, training compute (the comparison's unit) and tokens there, and
    the comparison of its arms against that baseline."""

    name: str
    params: float
    compute: float
    comparison: Comparison
    rung: str
    budget: int | None = None

    tokens: float = math.nan
    """The baseline arm's training tokens here (NaN where its runs do not record them)."""

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params


@dataclass(frozen=True)
class ArmLadder:
    """One arm across the rungs: its finished runs' `points` (seed, rung, compute, value) and
    its fit, or why none could be made."""

    arm: str
    points: pd.DataFrame
    fit: ArmFit | None
    problem: str | None


@dataclass(frozen=True)
class LadderResult:
    """One arm against the baseline arm: `scaling.compare_on_ladder`'s result (or why there
    is none) and `rungs`, a row per rung (rung, compute, delta with its interval, corrected p,
    the compute multiplier with its interval and where it was read, the decision at that rung
    and whether it agrees with the top rung's)."""

    arm: str
    result: LadderComparison | None
    problem: str | None
    rungs: pd.DataFrame


@dataclass(frozen=True)
class Ladder:
    """The ladder's comparison: the rungs by compute, the arms' fits, one `LadderResult` per
    arm but the baseline, and `ranking` (a row per rung, a column per arm: 1 is the best mean)."""

    metric: str
    baseline: str
    rungs: list[Rung]
    arms: dict[str, ArmLadder]
    results: list[LadderResult]
    ranking: pd.DataFrame
    extrapolate_factor: float
    level: float
    compute_unit: str
    runset: RunSet

    @property
    def maximize(self) -> bool:
        return is_maximized(self.metric)


def is_ladder(runset: RunSet) -> bool:
    """Whether every run is a ladder's (tagged with its rung and arm)."""
    runs = runset.runs
    columns = [f"tags.{RUNG_TAG}", f"tags.{ARM_TAG}"]
    return len(runs) > 0 and all(c in runs.columns and runs[c].notna().all() for c in columns)


def compare_ladder(
    runset: RunSet,
    options: CompareOptions | None = None,
    *,
    extrapolate_factor: float = DEFAULT_EXTRAPOLATION,
    level: float = 0.95,
) -> Ladder:
    """The ladder's comparison of `runset` (`is_ladder`). `options.baseline` names an arm
    (default: the arm of the earliest run, the spec's first); each rung's comparison takes the
    other arms against it with the other `options` (`table.compare`)."""
    options = options or CompareOptions()
    metric = options.metric
    if not extrapolate_factor > 0:
        raise CompareError(f"--extrapolate: must be a factor > 0, got {extrapolate_factor}")
    runs = runset.runs.sort_values("start_time", kind="stable")
    rung_of, arm_of = runs[f"tags.{RUNG_TAG}"].astype(str), runs[f"tags.{ARM_TAG}"].astype(str)
    budget_of = pd.to_numeric(
        runs.get(f"tags.{BUDGET_TAG}", pd.Series(math.nan, index=runs.index)), errors="coerce"
    )
    arms = list(dict.fromkeys(arm_of))
    baseline = arms[0] if options.baseline is None else options.baseline
    if baseline not in arms:
        raise CompareError(f"unknown --baseline {baseline!r}; arms: {', '.join(arms)}")
    by_id = runset.runs.set_index("run_id")
    per_step, unit = compute_per_step(runset.runs)
    steps = pd.to_numeric(by_id.get("params.train.steps"), errors="coerce")
    spent = pd.Series(steps.to_numpy() * per_step.to_numpy(), index=by_id.index)
    tokens = pd.Series(
        steps.to_numpy() * tokens_per_step(runset.runs).to_numpy(), index=by_id.index
    )
    params = pd.to_numeric(by_id.get("params.num_params"), errors="coerce")
    by_rung: dict[str, list[Rung]] = {}
    for name in dict.fromkeys(rung_of):
        found = {int(b) for b in budget_of[rung_of == name].dropna()}
        budgets: list[int | None] = [*sorted(found)] if found else [None]
        for budget in budgets:
            mine = (rung_of == name) & (budget_of.isna() if budget is None else budget_of == budget)
            base_runs = runs.loc[mine & (arm_of == baseline), "run_id"]
            if base_runs.empty:  # a budget the baseline has not trained (yet) is no point
                continue
            group = str(runs.loc[base_runs.index[0], "variant"])
            comparison = compare(
                runset.subset(runset.runs["run_id"].isin(runs.loc[mine, "run_id"])),
                replace(options, baseline=group),
            )
            first = base_runs.iloc[0]
            label = name if budget is None else f"{name}@{budget}"
            by_rung.setdefault(name, []).append(
                Rung(label, float(params[first]), float(spent[first]), comparison, name, budget,
                     float(tokens[first]))
            )  # fmt: skip
        if name not in by_rung:
            raise CompareError(f"rung {name} has no run of the baseline arm {baseline!r}")
    # Rung by rung in the order of their largest budget's compute, each rung's budgets shortest
    # first: the last point is the largest rung's longest budget.
    rungs = [p for points in sorted(by_rung.values(), key=lambda r: r[-1].compute) for p in points]
    points = _points(rungs, runs, spent, metric)
    fits = {arm: _fit(arm, points[points["arm"] == arm], level) for arm in arms}
    ranking = _ranking(points, rungs, is_maximized(metric))
    results = _holm_over_trends(
        [
            _result(arm, baseline, rungs, fits, runs, extrapolate_factor, level, metric)
            for arm in arms
            if arm != baseline
        ],
        level,
        is_maximized(metric),
    )
    return Ladder(
        metric=metric,
        baseline=baseline,
        rungs=rungs,
        arms=fits,
        results=results,
        ranking=ranking,
        extrapolate_factor=extrapolate_factor,
        level=level,
        compute_unit=unit,
        runset=runset,
    )


def _holm_over_trends(
    results: list[LadderResult], level: float, maximize: bool
) -> list[LadderResult]:
    """The results with their trend tests Holm-corrected over the ladder (`holm_trends`)."""
    fitted = [r for r in results if r.result is not None]
    corrected = iter(holm_trends([cast(LadderComparison, r.result) for r in fitted], level))
    return [r if r.result is None else replace(r, result=next(corrected)) for r in results]


def _points(rungs: list[Rung], runs: pd.DataFrame, spent: pd.Series, metric: str) -> pd.DataFrame:
    """Every finished run's (arm, seed, rung, compute, value)."""
    arm_by_id = runs.set_index("run_id")[f"tags.{ARM_TAG}"].astype(str)
    rows = []
    for rung in rungs:
        finished = rung.comparison.runs
        finished = finished[(finished["status"] == "FINISHED") & finished[metric].notna()]
        for _, run in finished.iterrows():
            rows.append(
                {
                    "arm": arm_by_id[run["run_id"]],
                    "seed": run["seed"],
                    "rung": rung.name,
                    "compute": float(spent[run["run_id"]]),
                    "value": float(run[metric]),
                }
            )
    return pd.DataFrame(rows, columns=["arm", "seed", "rung", "compute", "value"])


def _fit(arm: str, points: pd.DataFrame, level: float) -> ArmLadder:
    """The arm's fit over the seeds that finished at 3 or more points (a seed's reruns at a point
    averaged), or why none could be made."""
    per_seed = {}
    for seed, mine in points.dropna(subset=["seed"]).groupby("seed"):
        at = mine.groupby("compute")["value"].mean()
        if len(at) >= 3:
            per_seed[int(seed)] = (at.index.to_numpy(dtype=float), at.to_numpy(dtype=float))
    if not per_seed:
        problem = "no seed finished at 3 or more points (a power law has 3 parameters)"
        return ArmLadder(arm, points, None, problem)
    try:
        return ArmLadder(arm, points, fit_arm(per_seed, level), None)
    except ValueError as e:
        return ArmLadder(arm, points, None, str(e))


def _ranking(points: pd.DataFrame, rungs: list[Rung], maximize: bool) -> pd.DataFrame:
    """Each arm's rank at each rung by its mean over seeds (1: the best)."""
    means = points.groupby(["rung", "arm"], sort=False)["value"].mean().unstack("arm")
    means = means.reindex([r.name for r in rungs])
    return means.rank(axis=1, ascending=not maximize, method="min")


def _result(
    arm: str,
    baseline: str,
    rungs: list[Rung],
    fits: dict[str, ArmLadder],
    runs: pd.DataFrame,
    factor: float,
    level: float,
    metric: str,
) -> LadderResult:
    rows: list[dict[str, object]] = []
    arm_of = runs.set_index("variant")[f"tags.{ARM_TAG}"].astype(str).to_dict()
    for rung in rungs:
        table = rung.comparison.table
        mine = table[[arm_of.get(v) == arm for v in table["variant"]]]
        if mine.empty:
            continue
        row = mine.iloc[0]
        rows.append({"rung": rung.name, "compute": rung.compute, **_rung_columns(row, metric)})
    frame = pd.DataFrame(rows)
    if len(frame):
        top = frame["delta"].iloc[-1]
        frame["agrees_with_top"] = [
            None if math.isnan(d) or math.isnan(top) else bool(np.sign(d) == np.sign(top))
            for d in frame["delta"]
        ]
    base_fit, arm_fit = fits[baseline], fits[arm]
    if base_fit.fit is None or arm_fit.fit is None:
        which = baseline if base_fit.fit is None else arm
        problem = base_fit.problem if base_fit.fit is None else arm_fit.problem
        return LadderResult(arm, None, f"no fit of {which}: {problem}", frame)
    try:
        result = compare_on_ladder(
            base_fit.fit,
            arm_fit.fit,
            _paired_differences(arm_fit.points, base_fit.points, rungs),
            np.array([r.compute for r in rungs], dtype=float),
            extrapolate_factor=factor,
            level=level,
            maximize=is_maximized(metric),
        )
    except ValueError as e:
        return LadderResult(arm, None, str(e), frame)
    return LadderResult(arm, result, None, frame)


def _paired_differences(
    variant: pd.DataFrame, baseline: pd.DataFrame, rungs: list[Rung]
) -> dict[int, np.ndarray]:
    """Per seed both arms ran, the variant's final value minus the baseline's at each rung
    (a seed's reruns averaged; NaN where either arm lacks it): shape (rungs,). Every rung
    enters, whatever it reads, so that the trend test selects nothing by its outcome."""
    names = [r.name for r in rungs]
    means = [
        points.dropna(subset=["seed"]).groupby(["seed", "rung"])["value"].mean().unstack("rung")
        for points in (variant, baseline)
    ]
    gaps = (means[0] - means[1]).reindex(columns=names).dropna(how="all")
    return {int(seed): row.to_numpy(dtype=float) for seed, row in gaps.iterrows()}


def _rung_columns(row: pd.Series, metric: str) -> dict[str, object]:
    """The comparison's columns of one arm at one rung, renamed for the ladder's table."""
    return {
        "variant": row["variant"],
        "n": row["n"],
        "delta": row[f"{metric}_delta"],
        "delta_low": row[f"{metric}_delta_low"],
        "delta_high": row[f"{metric}_delta_high"],
        "p_adj": row[f"{metric}_p_adj"],
        "within_noise": row[f"{metric}_within_noise"],
        "compute_x": row["compute_x"],
        "compute_x_bound": row["compute_x_bound"],
        "compute_x_low": row["compute_x_low"],
        "compute_x_high": row["compute_x_high"],
        "compute_x_where": row["compute_x_where"],
    }
