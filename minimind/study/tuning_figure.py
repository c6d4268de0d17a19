"""An axis's tuning figure: each of its tuned arms' sweep runs, the final objective against the
param its sweep searched (`compare.tuning.TuningCurve`), so that a reader sees where each arm's
optimum lies, how flat it is, and the runs that tried past the grid.

A line per arm through the median over seeds of its trials at each value (several seeds where a
sweep scored a trial by their median, each seed a small dot), a hollow marker per run past the
grid, a star at the value the arm was evaluated at, and a cross at the worst result drawn for a
trial that ended without the objective (diverged, failed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from minimind.compare.tuning import TuningCurve, scored_points

LOG_RATIO = 4.0
"""Values spanning at least this factor (all positive) are drawn on a log axis: a rate grid."""


def ticks_at_values_tried(ax: Axes, values: Sequence[float]) -> None:
    """Ticks at the `values` tried, written plainly (0.004, not 4m or 4×10⁻³), and no others."""
    ax.set_xticks(values)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def tuning_figures(
    curves: Mapping[str, Sequence[TuningCurve]], metric: str, title: str
) -> dict[str, Figure]:
    """One figure per param searched (by param) over the arms of `curves` (by label), the final
    `metric` of each run; empty without curves."""
    objective = f"metrics.{metric}"
    params = list(dict.fromkeys(c.param for arm in curves.values() for c in arm))
    figures = {}
    for param in params:
        fig, ax = plt.subplots(figsize=(7.5, 4.5), layout="constrained")
        tried: set[float] = set()
        scored: list[float] = []
        failed: list[tuple[float, int]] = []
        for k, (label, arm) in enumerate(curves.items()):
            color = plt.get_cmap("tab10")(k % 10)
            for curve in (c for c in arm if c.param == param):
                column = [f"params.{param}"]
                scores, lost = scored_points(curve.trials, column, objective)
                median = scores.groupby(level=0).median().sort_index()
                ax.plot(median.index, median.to_numpy(), "o-", color=color, label=label)
                if scores.index.duplicated().any():  # several seeds a value: each its dot
                    ax.plot(scores.index, scores.to_numpy(), ".", color=color, alpha=0.4, ms=4)
                failed += [(float(v), k) for v in lost]
                past, _ = scored_points(curve.past, column, objective)
                ax.plot(past.index, past.to_numpy(), "o", mfc="none", color=color, ms=9)
                medians = pd.concat([median, past.groupby(level=0).median()])
                best = medians.groupby(level=0).min()
                if curve.chosen in best.index:
                    ax.plot([curve.chosen], [best[curve.chosen]], "*", color=color, ms=16)
                tried |= {*scores.index, *lost, *past.index}
                scored += [*scores, *past]
        if failed:
            top = max(scored) if scored else ax.get_ylim()[1]  # the worst result drawn
            for value, k in failed:
                ax.plot([value], [top], "x", color=plt.get_cmap("tab10")(k % 10), ms=10)
        values = sorted(tried)
        if values and values[0] > 0 and values[-1] / values[0] >= LOG_RATIO:
            ax.set_xscale("log")
        ticks_at_values_tried(ax, values)
        ax.set_xlabel(param)
        ax.set_ylabel(f"final {metric}")
        ax.set_title(f"{title}\n★ evaluated at, ○ past the grid, × no result", fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        figures[param] = fig
    return figures
