"""The study's forest plot: every comparison's Δ (arm − reference) with the interval that decides
it (`analysis.deciding_interval`), over the equivalence margin's band and, where a source gives
one, the sourced magnitude on the side the literature expects (`ArmComparison.magnitude_bpb`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from minimind.study.analysis import Decided
from minimind.study.manifest import ArmComparison

WIDE = 10.0
"""An interval this many times as wide as the median row's is cut at the range of the others:
one unsettled row (a stalled seed) would otherwise flatten every other row to a dot."""
CAPTION = (
    "Each comparison's Δ (arm − reference) with the interval that decides it: the sequential "
    "design's repeated interval where it stopped or reached the cap, else the fixed-sample one. "
    "Grey band: the equivalence margin. Orange bar: the magnitude the row's source reports, on "
    "the side it expects. Colour of the point: its agreement with the expectation. An interval "
    f"over {WIDE:g} times as wide as the median row's is cut at the other rows' range (an arrow "
    "where it goes on), its numbers written beside it."
)
COLORS = {"agrees": "#1a7f37", "disagrees": "#cf222e"}
OTHER = "#9a6700"
AGREEMENT_KEYS = {
    COLORS["agrees"]: "agrees",
    COLORS["disagrees"]: "disagrees",
    OTHER: "too weak to tell",
}


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
    sized = [_sourced_span(row.comparison, maximize) for row in rows]
    lo, hi = _view(rows, margin, [s for s in sized if s is not None])
    labelled = False
    for y, (row, size) in enumerate(zip(rows, sized, strict=True)):
        if size is not None:
            low, high = size
            width = max(high - low, margin / 40)  # a single value still shows
            ax.barh(y, width, left=low, height=0.5, color="#fb8500", alpha=0.45, zorder=1,
                    label=None if labelled else "sourced magnitude")  # fmt: skip
            labelled = True
        if row.decided is not None:
            _interval(ax, y, row.decided, COLORS.get(row.agreement, OTHER), (lo, hi))
    ax.set_xlim(lo, hi)
    ax.set_yticks(range(len(rows)), [r.label for r in rows], fontsize="small")
    ax.invert_yaxis()
    better = "higher" if maximize else "lower"
    ax.set_xlabel(f"Δ {metric} (arm − reference; {better} is better)")
    ax.grid(axis="x", alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    shown = dict.fromkeys(COLORS.get(r.agreement, OTHER) for r in rows if r.decided is not None)
    handles += [  # the points' colours: their agreement with the expectation
        Line2D([], [], ls="none", marker="o", color=color, label=AGREEMENT_KEYS[color])
        for color in shown
    ]
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title(f"Δ {metric} with its deciding interval", fontsize="medium")
    return fig


def _sourced_span(comparison: ArmComparison, maximize: bool) -> tuple[float, float] | None:
    """The sourced magnitude as a span of Δ, on the side the source expects."""
    size = comparison.magnitude_range()
    if size is None:
        return None
    up = (comparison.expect == "better") == maximize
    return (size[0], size[1]) if up else (-size[1], -size[0])


def _view(
    rows: Sequence[ForestRow], margin: float, sized: Sequence[tuple[float, float]]
) -> tuple[float, float]:
    """The x range: the margin's band, the sourced spans and every interval but those over
    `WIDE` times as wide as the median one, with a little room."""
    decided = [r.decided for r in rows if r.decided is not None]
    typical = float(np.median([d.high - d.low for d in decided]))
    ends = [-margin, margin, *(v for span in sized for v in span)]
    ends += [v for d in decided if d.high - d.low <= WIDE * typical for v in (d.low, d.high)]
    pad = 0.05 * (max(ends) - min(ends))
    return min(ends) - pad, max(ends) + pad


def _interval(ax: Axes, y: int, d: Decided, color: str, view: tuple[float, float]) -> None:
    """One row's Δ and interval, cut at `view` with an arrow at each end it goes past and its
    numbers written inside the edge."""
    lo, hi = view
    if lo <= d.low and d.high <= hi:
        ax.errorbar(
            d.delta, y, xerr=[[d.delta - d.low], [d.high - d.delta]], fmt="o", color=color,
            capsize=3, ms=5, zorder=2,
        )  # fmt: skip
        return
    ax.plot([max(d.low, lo), min(d.high, hi)], [y, y], color=color, lw=1.5, zorder=2)
    if lo <= d.delta <= hi:
        ax.plot(d.delta, y, "o", color=color, ms=5, zorder=2)
    for end, edge, arrow in ((d.low, lo, "<"), (d.high, hi, ">")):
        if not lo <= end <= hi:
            ax.plot(edge, y, arrow, color=color, ms=7, zorder=3, clip_on=False)
    right = d.high > hi
    ax.annotate(
        f"Δ {d.delta:+.4f} [{d.low:+.4f}, {d.high:+.4f}]", (hi if right else lo, y),
        xytext=(-6 if right else 6, 4), textcoords="offset points",
        ha="right" if right else "left", va="bottom", fontsize="x-small", color=color,
    )  # fmt: skip
