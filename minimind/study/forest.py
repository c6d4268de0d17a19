"""The study's forest plot: every comparison's Δ (arm − reference) with the interval that decides
it (`analysis.deciding_interval`), over the equivalence margin's band and, where a source gives
one, the sourced magnitude on the side the literature expects (`ArmComparison.magnitude_bpb`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from minimind.study.analysis import Decided
from minimind.study.manifest import ArmComparison

CAPTION = (
    "Each comparison's Δ (arm − reference) with the interval that decides it: the sequential "
    "design's repeated interval where it stopped or reached the cap, else the fixed-sample one. "
    "Grey band: the equivalence margin. Orange bar: the magnitude the row's source reports, on "
    "the side it expects. Colour of the point: its agreement with the expectation."
)
COLORS = {"agrees": "#1a7f37", "disagrees": "#cf222e"}
OTHER = "#9a6700"


@dataclass(frozen=True)
class ForestRow:
    """One line of the plot: its label, what decides it, its comparison (for the sourced
    magnitude) and its agreement."""

    label: str
    decided: Decided | None
    comparison: ArmComparison
    agreement: str


def forest_figure(
    rows: Sequence[ForestRow], margin: float, metric: str, maximize: bool
) -> Figure | None:
    """The forest plot, top row first; None when no row has an interval."""
    if not any(r.decided for r in rows):
        return None
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 1.6), layout="constrained")
    ax.axvspan(-margin, margin, color="0.85", zorder=0, label=f"margin ±{margin:g}")
    ax.axvline(0, color="0.4", lw=0.8, zorder=1)
    sourced = False
    for y, row in enumerate(rows):
        size = row.comparison.magnitude_range()
        if size is not None:
            up = (row.comparison.expect == "better") == maximize
            low, high = (size[0], size[1]) if up else (-size[1], -size[0])
            width = max(high - low, margin / 40)  # a single value still shows
            ax.barh(y, width, left=low, height=0.5, color="#fb8500", alpha=0.45, zorder=1,
                    label=None if sourced else "sourced magnitude")  # fmt: skip
            sourced = True
        if row.decided is None:
            continue
        d = row.decided
        color = COLORS.get(row.agreement, OTHER)
        ax.errorbar(
            d.delta, y, xerr=[[d.delta - d.low], [d.high - d.delta]], fmt="o", color=color,
            capsize=3, ms=5, zorder=2,
        )  # fmt: skip
    ax.set_yticks(range(len(rows)), [r.label for r in rows], fontsize="small")
    ax.invert_yaxis()
    better = "higher" if maximize else "lower"
    ax.set_xlabel(f"Δ {metric} (arm − reference; {better} is better)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    ax.set_title(f"Δ {metric} with its deciding interval", fontsize="medium")
    return fig
