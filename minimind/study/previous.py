"""This study's findings beside an earlier study's (`Study.previous`): which hold, flip, become
undecided or are newly decided, and why (each comparison's `why`).

Both sides are findings tables as `findings.csv` writes them (`report.findings_csv`). A row's
outcome is what its test decided, not whether it met the expectation: `better` or `worse` (a
difference in that direction, arm against reference), `equal` (equivalent within the margin), or
`undecided`; the sequential design's stop where the table has one, else the fixed-sample interval
against zero. A row that names the previous row it repeats (a comparison's `previous:`, by that
study's labels) joins that row; the others join on (axis, arm, against), then on (arm, against)
by label for a row whose axis was renamed. Each table is read by its own metric (`findings_metric`):
the earlier study may have scored another one (val/bpb on one corpus, val/bpb_macro over domains).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from minimind.record import is_maximized
from minimind.study.analysis import StudyError

Outcome = str
"""'better', 'worse', 'equal' or 'undecided'."""

COLUMNS = ["axis", "comparison", "previous", "now", "status", "why"]
KEYS = ("axis", "arm", "against")
Labels = tuple[str, str]
"""A row's (arm, against) labels."""


def read_previous(path: Path, joins: Mapping[Labels, Labels] | None = None) -> pd.DataFrame:
    """An earlier study's findings.csv; `StudyError` naming `previous.findings` when it cannot be
    read as one, or when it lacks a row that `joins` (`Study.previous_rows`: this study's labels
    -> that study's) names."""
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise StudyError(f"previous.findings: cannot read {path}: {e}") from e
    missing = [c for c in (*KEYS, "agreement") if c not in table.columns]
    if missing:
        raise StudyError(f"previous.findings: {path} has no column {', '.join(missing)}")
    if len(_deltas(table)) != 1:
        raise StudyError(
            f"previous.findings: {path} has {len(_deltas(table))} columns <metric>_delta, "
            "not the one a findings table has"
        )
    rows = set(zip(table["arm"], table["against"], strict=True))
    for (arm, against), (old_arm, old_against) in (joins or {}).items():
        if (old_arm, old_against) not in rows:
            raise StudyError(
                f"previous.findings: {path} has no row {old_arm!r} vs {old_against!r}, which "
                f"the comparison {arm!r} vs {against!r} names as its `previous`"
            )
    return table


def _deltas(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if str(c).endswith("_delta")]


def findings_metric(table: pd.DataFrame) -> str:
    """The metric a findings table reports: the one of its column `<metric>_delta`."""
    (column,) = _deltas(table)
    return column.removesuffix("_delta")


def outcome(row: pd.Series, metric: str, maximize: bool) -> Outcome:
    """What the row's test decided (module docstring)."""
    stop = row.get("sequential_stop")
    delta = row.get(f"{metric}_delta")
    if isinstance(stop, str):
        if stop == "equivalent":
            return "equal"
        if stop != "difference":
            return "undecided"
        low = high = delta
    else:
        low, high = row.get(f"{metric}_delta_low"), row.get(f"{metric}_delta_high")
    if pd.isna(low) or pd.isna(high) or low <= 0 <= high:
        return "undecided"
    return "better" if (low > 0) == maximize else "worse"


def _verdict(row: pd.Series, metric: str, maximize: bool) -> str:
    """'worse (+0.097): agrees with worse'."""
    delta = row.get(f"{metric}_delta")
    size = "" if pd.isna(delta) else f" ({delta:+.3f})"
    return f"{outcome(row, metric, maximize)}{size}: {row['agreement']} with {row['expect']}"


def _previous_verdict(before: pd.Series, new: pd.Series, metric: str, maximize: bool) -> str:
    """The previous row's verdict, with its labels where they are not the current row's."""
    verdict = _verdict(before, metric, maximize)
    if (before["arm"], before["against"]) == (new["arm"], new["against"]):
        return verdict
    return f"{verdict} ({before['arm']} vs {before['against']})"


def _status(before: Outcome | None, now: Outcome | None) -> str:
    if before is None:
        return "new comparison"
    if now is None:
        return "not repeated"
    if before == "undecided":
        return "undecided in both" if now == "undecided" else "newly decided"
    if now == "undecided":
        return "now undecided"
    return "holds" if before == now else "flips"


def compare_findings(
    previous: pd.DataFrame,
    current: pd.DataFrame,
    why: dict[tuple[str, str], str],
    metric: str,
    maximize: bool,
    joins: Mapping[Labels, Labels] | None = None,
) -> pd.DataFrame:
    """A row per comparison of either table (`COLUMNS`): the previous and the current verdict,
    the status (holds, flips, now undecided, newly decided, undecided in both, new comparison,
    not repeated) and `why`, by the current row's (arm, against) labels; `joins`, the rows that
    name their previous row (module docstring). `metric` and `maximize` read `current`;
    `previous` is read by its own metric (`findings_metric`)."""
    old = previous.reset_index(drop=True)
    old_metric = findings_metric(old)
    old_maximize = is_maximized(old_metric)
    matched: set[int] = set()
    rows = []
    for _, new in current.iterrows():
        j = _match(old, new, matched, (joins or {}).get((new["arm"], new["against"])))
        before = None if j is None else old.loc[j]
        if j is not None:
            matched.add(j)
        rows.append(
            {
                "axis": new["axis"],
                "comparison": f"{new['arm']} vs {new['against']}",
                "previous": "-"
                if before is None
                else _previous_verdict(before, new, old_metric, old_maximize),
                "now": _verdict(new, metric, maximize),
                "status": _status(
                    None if before is None else outcome(before, old_metric, old_maximize),
                    outcome(new, metric, maximize),
                ),
                "why": why.get((new["arm"], new["against"]), ""),
            }
        )
    for j, before in old.iterrows():
        if j not in matched:
            rows.append(
                {
                    "axis": before["axis"],
                    "comparison": f"{before['arm']} vs {before['against']}",
                    "previous": _verdict(before, old_metric, old_maximize),
                    "now": "-",
                    "status": _status(outcome(before, old_metric, old_maximize), None),
                    "why": "",
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def _match(old: pd.DataFrame, new: pd.Series, taken: set[int], named: Labels | None) -> int | None:
    """The index of `new`'s row in `old`: the row `named` (by its labels) when given, else same
    axis, arm and against, else same arm and against (an axis renamed); the first not taken."""
    free = ~old.index.isin(list(taken))
    arm, against = named or (new["arm"], new["against"])
    same_pair = (old["arm"] == arm) & (old["against"] == against) & free
    for hit in (same_pair & (old["axis"] == new["axis"]), same_pair):
        if hit.any():
            return int(old.index[hit][0])
    return None
