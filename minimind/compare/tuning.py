"""Whether a tuned value is tuned: a value on the edge of what its sweep tried is not.

A sweep's trials (runs tagged `trial_number`) of one cell (its Optuna study, tag `study`) try
values of the params it searches; the best is written into `best.yaml`, whose runs are the
tuned arm. When that value is the lowest or highest the cell's trials tried, the optimum may
lie beyond the searched range: the arm ran at the best value tried, not at a tuned one
(`minimind sweep --best` warns of it from the declared range, `minimind.sweep.space`;
`minimind compare` and the study read it from the trials, since a store keeps runs, not sweep
specs).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd

from minimind.compare.runs import ALL_RUNS, load_runs
from minimind.compare.table import (
    UNPOOLED_PARAMS,
    UNPOOLED_PREFIXES,
    Comparison,
    resolve_group_key,
)
from minimind.record import STUDY_TAG, TRIAL_NUMBER_TAG, is_maximized

MIN_VALUES = 3
"""Fewer distinct values tried than this have no inside, so no edge."""


def _trains(column: str) -> bool:
    """Whether `column` is a param that sets how a run trains: not one that names, records or
    plans it (`compare.table.UNPOOLED_*`). A trial's seeds repeat its point and search nothing;
    a sweep's own `sweep.*` settings may differ between its trials (a grid grown, a trial run
    before) and its best.yaml runs do not log them."""
    if not column.startswith("params."):
        return False
    name = column.removeprefix("params.")
    return name not in UNPOOLED_PARAMS and not name.startswith(UNPOOLED_PREFIXES)


def _numbers(column: pd.Series) -> pd.Series:
    return pd.to_numeric(column, errors="coerce")


@dataclass(frozen=True)
class TuningCurve:
    """How a sweep tuned one param of an arm: its cell's trials (`trials`, the rows of the
    sweep's runs), the runs past the cell's grid that train as the cell does (`past`, empty
    without), and the arm's value of it (`chosen`)."""

    param: str
    """The param, unprefixed: `train.optimizer.lr`."""
    trials: pd.DataFrame
    past: pd.DataFrame
    chosen: float


def tuning_curves(
    runs: pd.DataFrame, trials: pd.DataFrame, beyond: pd.DataFrame | None = None
) -> list[TuningCurve]:
    """One curve per param that the sweep cell of `trials` which `runs` (one arm's runs)
    belong to searched (`_cells`: which cell, and the params it searched), with the runs of `beyond`
    that try the cell past its grid (`_fixed`); empty when no cell matches."""
    curves = []
    for cell, varying in _cells(runs, trials):
        past = _fixed(cell, varying, beyond) if beyond is not None else cell.iloc[:0]
        for column in varying:
            value = _numbers(runs[column]).dropna()
            if not value.empty:
                param = column.removeprefix("params.")
                curves.append(TuningCurve(param, cell, past, float(value.iloc[0])))
    return curves


def _cells(runs: pd.DataFrame, trials: pd.DataFrame) -> Iterator[tuple[pd.DataFrame, list[str]]]:
    """The sweep cells of `trials` (each its Optuna study, tag `study`) that `runs` belong to,
    each with the params its trials vary (`edge_warnings`)."""
    if trials.empty or runs.empty or f"tags.{STUDY_TAG}" not in trials:
        return
    params = [c for c in trials.columns if _trains(c) and c in runs]
    across = [c for c in params if trials[c].nunique(dropna=True) > 1]
    first = runs.iloc[0]
    for _, cell in trials.groupby(f"tags.{STUDY_TAG}"):
        varying = [c for c in across if cell[c].nunique(dropna=True) > 1]
        defining = [c for c in across if c not in varying]
        if varying and all(_same(first[c], cell[c].iloc[0]) for c in defining):
            yield cell, varying


def edge_warnings(
    runs: pd.DataFrame,
    trials: pd.DataFrame,
    beyond: pd.DataFrame | None = None,
    objective: str | None = None,
) -> list[str]:
    """One line per param searched by the sweep cell of `trials` (the trials of one experiment,
    with `params.*` and `tags.study` columns) that `runs` (one arm's evaluation runs) belong to,
    when the arm's value of it is the lowest or highest the cell tried (of at least `MIN_VALUES`
    distinct numbers). A cell is its trials' Optuna study; the arm belongs to it when it has the
    values that set the cell apart from the others (the ablated ones, such as the block), and a
    param the cell's trials vary is one it searched. Empty when no cell matches.

    `beyond`: plain runs, outside the sweep, that try a cell's params past its grid; a run of
    them counts as tried in the cells whose fixed params it shares (`_fixed`). With `objective`
    (a metric's column: `metrics.val/bpb` in a store's runs), a point of them whose median over
    its runs scored better than every point of the cell's trials is a line too (`_beaten`): the
    arm runs at a value that is not the best tried."""
    warnings = []
    for cell, varying in _cells(runs, trials):
        if beyond is not None and not beyond.empty:
            past = _fixed(cell, varying, beyond)
            if objective is not None:
                warnings += _beaten(cell, past, varying, objective)
            cell = pd.concat([cell, past], ignore_index=True)
        for column in varying:
            tried = sorted(set(_numbers(cell[column]).dropna()))
            value = _numbers(runs[column]).dropna()
            if len(tried) < MIN_VALUES or value.empty:
                continue
            chosen = float(value.iloc[0])
            if chosen in (tried[0], tried[-1]):
                end = "lowest" if chosen == tried[0] else "highest"
                key = column.removeprefix("params.")
                warnings.append(
                    f"{key} = {chosen:.4g} is the {end} value its sweep tried "
                    f"([{tried[0]:.4g}, {tried[-1]:.4g}]): the optimum may lie beyond the range, "
                    "so it is not tuned"
                )
    return warnings


def _fixed(cell: pd.DataFrame, varying: list[str], beyond: pd.DataFrame) -> pd.DataFrame:
    """The runs of `beyond` that train as the cell's trials do but for its `varying` params:
    equal to them on every param the trials hold fixed and the run logs that sets how a run
    trains (`_trains`: the spec's name and its `sweep.*` settings aside)."""
    fixed = [
        c
        for c in cell.columns
        if _trains(c) and c not in varying and c in beyond and cell[c].nunique(dropna=False) == 1
    ]
    keep = pd.Series(True, index=beyond.index)
    for c in fixed:
        keep &= beyond[c].map(lambda v, c=c: _same(v, cell[c].iloc[0]))
    return beyond[keep]


def _beaten(
    cell: pd.DataFrame, past: pd.DataFrame, varying: list[str], objective: str
) -> list[str]:
    """A line when the runs of `past` at one point (values of the `varying` params) scored
    better on `objective` than the cell's trials at every point, each point by the median over
    its seeds (`scored_points`; a point where a seed failed scores nothing): a sweep that scores
    a trial by the median of its seeds reads a point past its grid as it reads its own."""
    if past.empty or objective not in past or objective not in cell:
        return []
    sign = -1.0 if is_maximized(objective.removeprefix("metrics.")) else 1.0

    def medians(runs: pd.DataFrame) -> pd.Series:
        scores, failed = scored_points(runs, varying, objective)
        by_point = (sign * scores).groupby(level=list(range(len(varying)))).median()
        return by_point[~by_point.index.isin(failed)]

    trial_best, scores = medians(cell).min(), medians(past)
    if scores.empty or not scores.min() < trial_best:
        return []
    point = scores.idxmin()
    point = point if isinstance(point, tuple) else (point,)
    values = ", ".join(
        f"{c.removeprefix('params.')} = {v:g}" for c, v in zip(varying, point, strict=True)
    )
    return [
        f"runs past its sweep's grid ({values}) scored {sign * scores.min():.4g}, better than "
        f"the sweep's best {sign * trial_best:.4g}: the value is not the best tried, so it is "
        "not tuned"
    ]


def scored_points(
    runs: pd.DataFrame, columns: list[str], objective: str
) -> tuple[pd.Series, pd.Index]:
    """What `runs` (a sweep cell's trials, or runs past its grid; with `seed`, `status` and
    `start_time`) scored at each point, a point being their values of the `columns` params:
    each seed's newest run there that ended, FINISHED or FAILED (an interrupted or pruned run
    ends KILLED, with no result), read as the sweep reads a trial's seed.

    Returns the `objective` of those that finished with it, indexed by their point (the value
    itself for one column), and the points where one failed (diverged, an invalid value, the
    objective never logged), as the sweep fails its trial there. A trial retrained after an
    interruption repeats its seeds: the newest run of a seed counts, once."""
    missing = pd.Series(float("nan"), index=runs.index)  # no run logged it
    frame = (
        runs[columns]
        .apply(pd.to_numeric, errors="coerce")
        .assign(
            _seed=runs["seed"].to_numpy(),
            _status=runs["status"].to_numpy(),
            _start=runs["start_time"].to_numpy(),
            _score=_numbers(runs.get(objective, missing)).to_numpy(),
        )
    )
    ended = frame["_status"].isin(["FINISHED", "FAILED"]) & frame[columns].notna().all(axis=1)
    newest = (
        frame[ended]
        .sort_values("_start", kind="stable")
        .drop_duplicates([*columns, "_seed"], keep="last")
    )
    scored = (newest["_status"] == "FINISHED") & newest["_score"].notna()
    failed = newest[~scored].set_index(columns).index.unique()
    return newest[scored].set_index(columns)["_score"], failed


def _same(a: object, b: object) -> bool:
    """Two params (text in MLflow) equal, as numbers when both are (`0.001` is `1e-3`)."""
    x, y = pd.to_numeric(pd.Series([a, b]), errors="coerce")
    return bool(x == y) if pd.notna(x) and pd.notna(y) else str(a) == str(b)


def trial_runs(runs: pd.DataFrame) -> pd.Series:
    """Which of `runs` are a sweep's trials (tagged `trial_number`)."""
    tag = runs.get(f"tags.{TRIAL_NUMBER_TAG}", pd.Series(index=runs.index, dtype=object))
    return tag.reindex(runs.index).notna()


def comparison_edges(comparison: Comparison) -> list[str]:
    """'<group>: <param> = <value> is the highest value its sweep tried ...' for each group of
    `comparison` (trials aside) tuned on the edge of what a sweep of its experiments tried."""
    runset = comparison.runset
    every = (  # `compare --all` has every run already; a narrower selection loads them
        runset.runs
        if runset.selection == ALL_RUNS
        else load_runs(
            runset.tracking_uri, runset.experiments, all_runs=True, client=runset.client
        ).runs
    )
    trials = every[trial_runs(every)]
    runs = runset.runs[~trial_runs(runset.runs)]
    if trials.empty or runs.empty:
        return []
    return [
        f"{group}: {warning}"
        for group, mine in runs.groupby(resolve_group_key(runs, comparison.by), sort=False)
        for warning in edge_warnings(mine, trials)
    ]
