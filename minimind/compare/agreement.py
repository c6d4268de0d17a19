"""Decision agreement on a ladder: is what a small rung (or a short budget) decides what the
largest decides? (DataDecide's question, Magnusson et al. 2025: ranking at 150M got about 80 %
of the pairwise decisions at 1B right.)

The ladder's points are its rungs, or, when its runs are budget branches (tagged `budget`,
`run/branches.py`), its (rung, budget) pairs; they are ordered by rung (by compute) and then
by budget, and the last one, the largest rung's longest budget, is the reference. Two tables
in one, a row each:
- `decision`: per comparison and point, the point's own decision (`ladder_render.decision`:
  better, worse, within noise) beside the reference's, and whether they agree;
- `ranking`: per point, the share of arm pairs its means order as the reference's do, with a
  percentile bootstrap interval over seeds (`stats.agreement.bootstrap_agreement`; the seeds
  every arm has at both points, resampled together).
A point's decisions are its comparison's (`compare.ladder`: a (rung, budget) point compares that
budget's runs against the baseline arm's run of the same rung and budget), as the ladder's rows
give them. `minimind compare` on a ladder gives the table as `decision_agreement` in
its JSON and as `decision_agreement.csv` in its report, whose "Decision agreement" section it is.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from minimind.compare.ladder import Ladder
from minimind.compare.ladder_render import decision
from minimind.foundations.document import Block, Heading, Paragraph, Table
from minimind.stats.agreement import bootstrap_agreement

COLUMNS = [
    "kind",
    "rung",
    "budget",
    "top_rung",
    "top_budget",
    "arm",
    "decision",
    "top_decision",
    "agrees",
    "agreement",
    "agreement_low",
    "agreement_high",
    "seeds",
    "arms",
]


def decision_agreement(ladder: Ladder, *, resamples: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """The ladder's decision rows, then its ranking rows (module docstring; `COLUMNS`): the
    decisions are the ladder's own rows per comparison (`LadderResult.rungs`), the values its
    arms' points (`ArmLadder.points`)."""
    points = {point.name: point for point in ladder.rungs}
    if not points:
        return pd.DataFrame(columns=COLUMNS)
    top = ladder.rungs[-1]
    where = {"top_rung": top.rung, "top_budget": top.budget}
    rows: list[dict[str, object]] = []
    for result in ladder.results:
        frame = result.rungs
        if frame.empty or frame["rung"].iloc[-1] != top.name:
            continue  # no reading at the reference: nothing to agree with
        made = [decision(row, ladder.maximize) for _, row in frame.iterrows()]
        for name, decided in zip(frame["rung"], made, strict=True):
            rows.append(
                {"kind": "decision", "rung": points[name].rung, "budget": points[name].budget,
                 **where, "arm": result.arm, "decision": decided, "top_decision": made[-1],
                 "agrees": decided == made[-1]}
            )  # fmt: skip
    values = pd.concat([fitted.points for fitted in ladder.arms.values()], ignore_index=True)
    by_point = values.pivot_table(index=["rung", "seed"], columns="arm", values="value")
    for point in ladder.rungs:
        small, large = paired_values(by_point, point.name, top.name)
        if small is None or large is None:
            continue
        value, low, high = bootstrap_agreement(small, large, resamples=resamples, seed=seed)
        rows.append(
            {"kind": "ranking", "rung": point.rung, "budget": point.budget, **where,
             "agreement": value, "agreement_low": low, "agreement_high": high,
             "seeds": small.shape[0], "arms": small.shape[1]}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def paired_values(
    values: pd.DataFrame, point: str, top: str
) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """[seeds, arms] at `point` and at `top` (`values`: a row per (point, seed), a column per
    arm): the arms at both, and the seeds every one of them finished at both."""
    names = values.index.get_level_values(0)
    if point not in names or top not in names:
        return None, None
    small = values.loc[point].dropna(axis=1, how="all")
    large = values.loc[top].dropna(axis=1, how="all")
    arms = [a for a in large.columns if a in small.columns]
    small, large = small[arms].dropna(), large[arms].dropna()
    seeds = small.index.intersection(large.index)
    if len(seeds) < 2 or len(arms) < 2:
        return None, None
    return small.loc[seeds].to_numpy(float), large.loc[seeds].to_numpy(float)


def _null(value: object) -> object:
    return None if isinstance(value, float) and math.isnan(value) else value


def with_agreement(ladder_json: str, table: pd.DataFrame) -> str:
    """`ladder_render.to_json`'s document with `decision_agreement` (`decision_agreement`'s
    table) added, NaN as null."""
    document = json.loads(ladder_json)
    document["decision_agreement"] = [
        {k: _null(v) for k, v in row.items()}
        for row in table.astype(object).to_dict(orient="records")
    ]
    return json.dumps(document, indent=2) + "\n"


def to_csv(table: pd.DataFrame) -> str:
    """`decision_agreement`'s table as CSV, a row each, `COLUMNS` in order (empty cells where a
    column does not apply to the row's kind)."""
    return table.to_csv(index=False)


def _label(rung: str, budget: float | None) -> str:
    """'r3', or 'r3 @ 800 steps' at a budget."""
    return rung if budget is None or pd.isna(budget) else f"{rung} @ {int(budget)} steps"


def agreement_blocks(table: pd.DataFrame, baseline: str, level: int = 2) -> list[Block]:
    """The report's section "Decision agreement" (a heading of `level`): each comparison's
    decision at every point beside the reference's, and each point's ranking agreement with its
    interval; nothing when no point has a reading."""
    if table.empty:
        return []
    decisions, ranking = table[table["kind"] == "decision"], table[table["kind"] == "ranking"]
    top = _label(table["top_rung"].iloc[0], table["top_budget"].iloc[0])
    blocks: list[Block] = [
        Heading(level, "Decision agreement"),
        Paragraph(
            f"Is the decision made at a smaller rung (or a shorter budget) the one made at the "
            f"largest, {top}? Each comparison's decision at a point is that point's comparison "
            "alone (better, worse or within noise at the corrected level). The ranking "
            "agreement is the share of arm pairs a point's means order as the largest's do (a "
            "tie counts half; DataDecide's decision accuracy), with a 95% percentile bootstrap "
            "interval over seeds (the same seeds at both points and for every arm).",
            "caption",
        ),
    ]
    if len(decisions):
        rows = [
            [f"{r['arm']} vs {baseline}", _label(r["rung"], r["budget"]), str(r["decision"]),
             str(r["top_decision"]), "yes" if r["agrees"] else "no"]
            for _, r in decisions.iterrows()
        ]  # fmt: skip
        headers = ["comparison", "point", "decision", f"decision at {top}", "agrees"]
        blocks.append(Table(headers, rows, "ladder"))
    if len(ranking):
        rows = [
            [_label(r["rung"], r["budget"]),
             f"{r['agreement']:.3g} [{r['agreement_low']:.3g}, {r['agreement_high']:.3g}]",
             str(int(r["seeds"])), str(int(r["arms"]))]
            for _, r in ranking.iterrows()
        ]  # fmt: skip
        headers = ["point", f"ranking agreement with {top} [95% CI]", "seeds", "arms"]
        blocks.append(Table(headers, rows, "ladder"))
    else:
        blocks.append(
            Paragraph("No ranking agreement: no point has 2 arms finished on 2 seeds they share "
                      "with the largest.")
        )  # fmt: skip
    return blocks
