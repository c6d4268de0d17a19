"""Decisions across scale: is what the study decides at its smaller size (and at its larger
size's shorter budgets) what it decides at the larger size's full budget?

The pairing says which arm is which at the larger size (`scale_of`: smaller arm key -> larger
arm key, one to one; `check_scale_of`). A comparison at the smaller size, `arm` against
`against`, is the larger size's comparison of `scale_of[arm]` against `scale_of[against]`; a
comparison with no counterpart at the other size is named in the table (`note`), never
silently dropped, and counts in no share. A comparison whose arms have no `scale_of` is at the
larger size, the reference.

Points, each read against the larger size's full budget:
- `smaller`: the smaller size's comparisons, as the study's axes decide them;
- `shorter budget`: each budget branch of the larger arms' runs shorter than their own
  (`run/branches.py`: tagged `budget`, the variant `budget=<steps>,<name>`), every larger axis
  compared again on those runs alone (the same paired test, correction and family as the axis:
  `analysis.analyse_axis`).
A decision is `ladder_render.decision` of the comparison's row (better, worse or within noise
at the family's corrected level). Per point, over the comparisons paired across the sizes and
decided at both: the share that agree with the larger size, with its exact Clopper-Pearson
interval (the units are comparisons, not seeds: a binomial share of k), and the ranking
agreement of the paired arms' means (`stats.agreement.bootstrap_agreement`, a percentile
bootstrap over the seeds every arm has at both points).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from minimind.compare import RunSet, render
from minimind.compare.agreement import paired_values
from minimind.compare.ladder_render import decision
from minimind.foundations.document import Block, BulletList, Heading, Paragraph, Table
from minimind.record import BUDGET_TAG, is_maximized
from minimind.stats.agreement import bootstrap_agreement
from minimind.study.analysis import AxisResult, StudyError, analyse_axis, arm_runs
from minimind.study.looks import spec_variant
from minimind.study.manifest import Arm, ArmComparison, Study, check_scale_of
from minimind.study.planning import arm_values

SMALLER = "smaller"
SHORTER = "shorter budget"
MISSING = render.MISSING
"""A decision not made: no comparison there, or no interval (`ladder_render.decision`)."""

COLUMNS = [
    "kind",  # "decision": a comparison at a point; "overall": a point's shares
    "point",  # SMALLER or SHORTER
    "budget",  # the shorter budget in steps (SHORTER), else empty
    "axis",  # the larger size's axis (or the smaller's, for a comparison missing at the larger)
    "comparison",  # "<arm label> vs <against label>" at the larger size (or the smaller)
    "arm",
    "against",  # the larger size's arm keys
    "decision",  # at the point
    "reference_decision",  # at the larger size's full budget
    "agrees",  # True/False, empty when either is missing
    "note",  # why a decision is missing, or why it counts in no share
    "counted",  # in the point's share: paired across the sizes and decided at both
    "agreeing",
    "compared",  # k of n comparisons paired and decided at both
    "share",
    "share_low",
    "share_high",  # Clopper-Pearson
    "ranking",
    "ranking_low",
    "ranking_high",  # bootstrap over seeds
    "seeds",
    "arms",
]


def clopper_pearson(agreeing: int, compared: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval at `level` of the share `agreeing`/`compared`
    (statsmodels' `beta` method); (nan, nan) for no comparison."""
    if compared == 0:
        return math.nan, math.nan
    low, high = proportion_confint(agreeing, compared, alpha=1 - level, method="beta")
    return float(low), float(high)


@dataclass(frozen=True)
class _Decided:
    """A comparison's decision at one point: where it sits, and why it is missing."""

    axis: str
    comparison: str
    decision: str
    note: str = ""


def scale_agreement(
    study: Study,
    axes: Sequence[AxisResult],
    runsets: Mapping[str, RunSet],
    scale_of: Mapping[str, str],
    *,
    level: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """The decision rows of every comparison at each point, then an "overall" row per point
    (module docstring; `COLUMNS`). `axes`, `runsets`: `analysis.analyse`'s axes and evaluation
    runs; `scale_of`: smaller arm key -> larger arm key (`check_scale_of`, raised here)."""
    check_scale_of(study, scale_of)
    if not scale_of:
        return pd.DataFrame(columns=COLUMNS)
    maximize = is_maximized(study.metric)
    larger_axes = [r for r in axes if not any(c.arm in scale_of for c in r.axis.comparisons)]
    reference = _decisions(study, larger_axes, maximize, scale_of=None)
    smaller = _decisions(study, axes, maximize, scale_of=scale_of)
    points: list[tuple[str, int | None, dict[tuple[str, str], _Decided]]] = [
        (SMALLER, None, smaller)
    ]
    larger_keys = list(dict.fromkeys(k for pair in reference for k in pair))
    for steps in shorter_budgets(study, larger_keys, runsets):
        points.append((SHORTER, steps, _budget_decisions(study, larger_axes, runsets, steps)))
    paired = set(smaller) & set(reference)
    rows: list[dict[str, object]] = []
    for point, budget, decided in points:
        mine = _decision_rows(point, budget, decided, reference, paired)
        overall = _overall(point, budget, mine, level)
        small, large = _ranking_values(study, scale_of, runsets, budget)
        if small is not None and large is not None:
            value, low, high = bootstrap_agreement(
                small, large, resamples=resamples, level=level, seed=seed
            )
            overall.update(ranking=value, ranking_low=low, ranking_high=high,
                           seeds=small.shape[0], arms=small.shape[1])  # fmt: skip
        rows += [*mine, overall]
    return pd.DataFrame(rows, columns=COLUMNS)


def _decisions(
    study: Study,
    axes: Sequence[AxisResult],
    maximize: bool,
    scale_of: Mapping[str, str] | None,
) -> dict[tuple[str, str], _Decided]:
    """{(larger arm, larger against): decision} of the axes' comparisons at one size: the
    larger's (`scale_of` None: comparisons of arms without one) or the smaller's (keyed by
    their larger arms)."""
    decided = {}
    for result in axes:
        for finding in result.findings:
            c = finding.comparison
            if (c.arm in (scale_of or {})) != (scale_of is not None):
                continue
            key = (scale_of[c.arm], scale_of[c.against]) if scale_of else (c.arm, c.against)
            made = _decide(finding.row, study.metric, maximize)
            decided[key] = _Decided(result.axis.name, f"{finding.arm} vs {finding.against}", made)
    return decided


def _decide(row: pd.Series, metric: str, maximize: bool) -> str:
    """`ladder_render.decision` of a study axis's row (its columns prefixed by the metric)."""
    delta, noise = row[f"{metric}_delta"], row[f"{metric}_within_noise"]
    return decision(pd.Series({"delta": delta, "within_noise": noise}), maximize)


def shorter_budgets(study: Study, keys: Sequence[str], runsets: Mapping[str, RunSet]) -> list[int]:
    """The budgets, in steps, shortest first, at which some of the arms `keys` have branch runs
    shorter than their own runs' budget (`run/branches.py`)."""
    found: set[int] = set()
    for key in keys:
        arm = study.arms[key]
        runs = runsets[arm.experiment].runs
        if f"tags.{BUDGET_TAG}" not in runs:
            continue
        own = pd.to_numeric(arm_runs(key, arm, runsets[arm.experiment])[f"tags.{BUDGET_TAG}"])
        if own.isna().all():
            continue
        name = spec_variant(key, arm, runsets[arm.experiment])
        budget = pd.to_numeric(runs[f"tags.{BUDGET_TAG}"], errors="coerce")
        branch = runs["variant"] == budget.map(lambda b, n=name: f"budget={b:.0f},{n}")
        found |= {int(b) for b in budget[branch & (budget < own.max())].dropna()}
    return sorted(found)


def budget_arm(key: str, arm: Arm, runset: RunSet, budget: int) -> Arm:
    """The arm's budget branch at `budget`: its label and seeds, the variant
    `budget=<budget>,<name>` of its spec's variant `name` (`looks.spec_variant`)."""
    name = spec_variant(key, arm, runset)
    return Arm(label=arm.label, experiment=arm.experiment, variant=f"budget={budget},{name}",
               seeds=arm.seeds)  # fmt: skip


def _budget_study(
    study: Study, keys: Sequence[str], runsets: Mapping[str, RunSet], budget: int
) -> Study:
    arms = dict(study.arms)
    for key in keys:
        arms[key] = budget_arm(key, study.arms[key], runsets[study.arms[key].experiment], budget)
    return study.model_copy(update={"arms": arms})


def _budget_decisions(
    study: Study, axes: Sequence[AxisResult], runsets: Mapping[str, RunSet], budget: int
) -> dict[tuple[str, str], _Decided]:
    """The larger axes compared again on their arms' branch runs at `budget`: an axis one of
    whose arms has none is missing, with the reason."""
    maximize = is_maximized(study.metric)
    decided: dict[tuple[str, str], _Decided] = {}
    for result in axes:
        comparisons: list[ArmComparison] = result.axis.comparisons
        keys = list(dict.fromkeys(k for c in comparisons for k in (c.arm, c.against)))
        try:
            again = analyse_axis(_budget_study(study, keys, runsets, budget), result.axis, runsets)
        except StudyError as e:
            for finding in result.findings:
                c = finding.comparison
                label = f"{finding.arm} vs {finding.against}"
                decided[(c.arm, c.against)] = _Decided(result.axis.name, label, MISSING, str(e))
            continue
        decided.update(_decisions(study, [again], maximize, scale_of=None))
    return decided


def _decision_rows(
    point: str,
    budget: int | None,
    decided: Mapping[tuple[str, str], _Decided],
    reference: Mapping[tuple[str, str], _Decided],
    paired: set[tuple[str, str]],
) -> list[dict[str, object]]:
    """A row per comparison at either the point or the reference, the reference's order first;
    counted when `paired` (at both sizes) and decided at both."""
    rows: list[dict[str, object]] = []
    for key in dict.fromkeys([*reference, *decided]):
        here, there = decided.get(key), reference.get(key)
        shown = there or here
        assert shown is not None
        note = ""
        if here is None:
            note = f"no comparison of {key[0]} against {key[1]} at the smaller size"
        elif there is None:
            note = f"no comparison of {key[0]} against {key[1]} at the larger size"
        else:
            note = here.note or there.note
        if not note and key not in paired:
            note = "no comparison at the smaller size: in no share"
        made = here.decision if here else MISSING
        ref = there.decision if there else MISSING
        both = here is not None and there is not None and MISSING not in (made, ref)
        rows.append(
            {"kind": "decision", "point": point, "budget": budget, "axis": shown.axis,
             "comparison": shown.comparison, "arm": key[0], "against": key[1],
             "decision": made, "reference_decision": ref,
             "agrees": (made == ref) if both else None, "note": note,
             "counted": both and key in paired}
        )  # fmt: skip
    return rows


def _overall(
    point: str, budget: int | None, rows: list[dict[str, object]], level: float
) -> dict[str, object]:
    """The point's share of agreeing decisions over its counted decision rows."""
    decided = [r["agrees"] for r in rows if r["counted"]]
    k, n = sum(bool(a) for a in decided), len(decided)
    low, high = clopper_pearson(k, n, level)
    return {"kind": "overall", "point": point, "budget": budget, "agreeing": k, "compared": n,
            "share": k / n if n else math.nan, "share_low": low, "share_high": high}  # fmt: skip


def _ranking_values(
    study: Study, scale_of: Mapping[str, str], runsets: Mapping[str, RunSet], budget: int | None
) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """[seeds, arms] of the paired arms at the point (the smaller size when `budget` is None,
    else the larger arms' branches at `budget`) and at the larger size's full budget: the
    arms with runs at both, the seeds every one of them finished at both
    (`compare.agreement.paired_values`)."""
    larger = {key: key for key in scale_of.values()}
    smaller = {scale_of[key]: key for key in scale_of}
    here = (
        _values(study, smaller, runsets)
        if budget is None
        else _values(study, larger, runsets, budget)
    )
    there = _values(study, larger, runsets)
    if len(here) < 2 or len(there) < 2:
        return None, None
    values = pd.concat(
        {"point": pd.DataFrame(here), "reference": pd.DataFrame(there)}, names=["point", "seed"]
    )
    return paired_values(values, "point", "reference")


def _values(
    study: Study, keys: Mapping[str, str], runsets: Mapping[str, RunSet], budget: int | None = None
) -> dict[str, pd.Series]:
    """{column: the arm's metric per seed} for each {column: arm key} of `keys`, at its budget
    branch of `budget` steps when given: an arm without finished runs there is left out, not
    ranked."""
    values = {}
    for column, key in keys.items():
        try:
            at = study if budget is None else _budget_study(study, [key], runsets, budget)
            found = arm_values(at, key, dict(runsets))
        except StudyError:
            continue
        if len(found):
            values[column] = found
    return values


def _point_label(point: str, budget: object, smaller: str, larger: str) -> str:
    return smaller if point == SMALLER else f"{larger} at {_steps(budget)} steps"


def _steps(budget: object) -> int | None:
    """A row's budget as steps (None for the smaller size's rows, NaN in the table)."""
    return None if pd.isna(budget) else int(float(str(budget)))


def _interval(value: object, low: object, high: object) -> str:
    if pd.isna(value):
        return "no reading"
    return f"{value:.3g} [{low:.3g}, {high:.3g}]"


def scale_blocks(
    table: pd.DataFrame,
    smaller: str = "the smaller size",
    larger: str = "the larger size",
    level: int = 2,
) -> list[Block]:
    """The report's section "Decisions across scale" (a heading of `level`) from
    `scale_agreement`'s table: each comparison's decision at every point beside the larger
    size's, each point's share of agreeing decisions and its ranking agreement with their
    intervals, and the comparisons left out of the shares, named; nothing for an empty table.
    `smaller`, `larger`: how the report names the two sizes."""
    if table.empty:
        return []
    decisions, overall = table[table["kind"] == "decision"], table[table["kind"] == "overall"]
    points = [(r["point"], _steps(r["budget"])) for _, r in overall.iterrows()]
    labels = [_point_label(p, b, smaller, larger) for p, b in points]
    blocks: list[Block] = [
        Heading(level, "Decisions across scale"),
        Paragraph(
            f"Is the decision made at {smaller} (or at a shorter budget of {larger}) the one "
            f"made at {larger}? A decision is the comparison's own at that point: "
            "better, worse or within noise, by the same paired test and the same family "
            "correction as its axis. The share counts the comparisons made at both sizes and "
            "decided at both, with its exact (Clopper-Pearson) 95% interval: with a handful of "
            "comparisons it is wide, and it says how often this study's small runs foretold its "
            "large ones, not how often small runs foretell large ones in general. The ranking "
            "agreement is the share of pairs of the paired arms whose means are ordered as at "
            f"{larger} (a tie counts half), with a 95% percentile bootstrap interval over "
            "the seeds every arm has at both points. A shorter budget's runs are branches of "
            f"{larger}'s: they share its runs' steps up to their own decay and their seeds, so "
            "their agreement with it is partly built in; the smaller size trains apart.",
            "caption",
        ),
    ]
    by_comparison: dict[tuple[str, str], dict[tuple[str, object], pd.Series]] = {}
    for _, r in decisions.iterrows():
        by_comparison.setdefault((r["arm"], r["against"]), {})[
            (r["point"], _steps(r["budget"]))
        ] = r
    headers = ["comparison"]
    for label in labels:
        headers += [label, "agrees"]
    headers.append(larger)
    rows = []
    for cells in by_comparison.values():
        first = next(iter(cells.values()))
        row = [str(first["comparison"])]
        for key in points:
            r = cells.get(key)
            agrees = None if r is None else r["agrees"]
            shown = "" if agrees is None or pd.isna(agrees) else ("yes" if agrees else "no")
            row += [MISSING if r is None else str(r["decision"]), shown]
        row.append(str(first["reference_decision"]))
        rows.append(row)
    blocks.append(Table(headers, rows))
    summary = [
        [label, f"{int(r['agreeing'])} of {int(r['compared'])}",
         _interval(r["share"], r["share_low"], r["share_high"]),
         _interval(r["ranking"], r["ranking_low"], r["ranking_high"]),
         "" if pd.isna(r["seeds"]) else str(int(r["seeds"])),
         "" if pd.isna(r["arms"]) else str(int(r["arms"]))]
        for label, (_, r) in zip(labels, overall.iterrows(), strict=True)
    ]  # fmt: skip
    summary_headers = [
        "point", "decisions agreeing", "share [95% exact CI]",
        "ranking agreement [95% bootstrap CI]", "seeds", "arms",
    ]  # fmt: skip
    blocks.append(Table(summary_headers, summary))
    notes = [
        f"{r['comparison']} ({_point_label(r['point'], r['budget'], smaller, larger)}): {r['note']}"
        for _, r in decisions.iterrows()
        if r["note"]
    ]
    if notes:
        blocks.append(Paragraph("Left out of the shares:"))
        blocks.append(BulletList(notes))
    return blocks
