"""Decision agreement on a ladder: is what a small rung decides what the largest decides?
(DataDecide's question, Magnusson et al. 2025: ranking at 150M got about 80 % of the pairwise
decisions at 1B right.)

Two tables in one, a row each:
- `decision`: per comparison and rung, the rung's own decision (`ladder_render.decision`:
  better, worse, within noise) beside the largest rung's, and whether they agree;
- `ranking`: per rung, the share of arm pairs its means order as the largest rung's do, with a
  percentile bootstrap interval over seeds (`stats.agreement.bootstrap_agreement`; the seeds
  every arm has at both rungs, resampled together).
`minimind compare` on a ladder gives it as `decision_agreement` in its JSON.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from minimind.compare.ladder import Ladder
from minimind.compare.ladder_render import decision
from minimind.stats.agreement import bootstrap_agreement

COLUMNS = [
    "kind",
    "rung",
    "top_rung",
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
    """The ladder's decision rows, then its ranking rows (module docstring; `COLUMNS`)."""
    if not ladder.rungs:
        return pd.DataFrame(columns=COLUMNS)
    top = ladder.rungs[-1].name  # the rungs are ordered by compute
    rows: list[dict[str, object]] = []
    for result in ladder.results:
        frame = result.rungs
        if frame.empty or frame["rung"].iloc[-1] != top:
            continue  # no reading at the largest rung: nothing to agree with
        decisions = [decision(row, ladder.maximize) for _, row in frame.iterrows()]
        for (_, row), made in zip(frame.iterrows(), decisions, strict=True):
            rows.append(
                {"kind": "decision", "rung": row["rung"], "top_rung": top, "arm": result.arm,
                 "decision": made, "top_decision": decisions[-1], "agrees": made == decisions[-1]}
            )  # fmt: skip
    points = pd.concat([fitted.points for fitted in ladder.arms.values()], ignore_index=True)
    values = points.pivot_table(index=["rung", "seed"], columns="arm", values="value")
    for rung in ladder.rungs:
        small, large = _paired(values, rung.name, top)
        if small is None or large is None:
            continue
        value, low, high = bootstrap_agreement(small, large, resamples=resamples, seed=seed)
        rows.append(
            {"kind": "ranking", "rung": rung.name, "top_rung": top, "agreement": value,
             "agreement_low": low, "agreement_high": high, "seeds": small.shape[0],
             "arms": small.shape[1]}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def _paired(
    values: pd.DataFrame, rung: str, top: str
) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """[seeds, arms] at `rung` and at `top`: the seeds every arm finished at both."""
    if rung not in values.index.get_level_values(0) or top not in values.index.get_level_values(0):
        return None, None
    small, large = values.loc[rung], values.loc[top]
    seeds = small.dropna().index.intersection(large.dropna().index)
    if len(seeds) < 2 or values.shape[1] < 2:
        return None, None
    return small.loc[seeds].to_numpy(float), large.loc[seeds].to_numpy(float)


def with_agreement(ladder_json: str, ladder: Ladder) -> str:
    """`ladder_render.to_json`'s document with `decision_agreement` added (NaN as null)."""
    document = json.loads(ladder_json)
    table = decision_agreement(ladder).astype(object)
    document["decision_agreement"] = [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        for row in table.to_dict(orient="records")
    ]
    return json.dumps(document, indent=2) + "\n"
