"""The ladder's figure (matplotlib, Agg): each arm's final objective against compute with its
seeds as points and its fitted law (dashed past the top rung, up to the extrapolation), and
each comparison's compute multiplier per rung with its interval, beside the extrapolated one."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from minimind.compare.ladder import Ladder  # noqa: E402


def ladder_figure(ladder: Ladder) -> Figure:
    """Left: objective against compute (log x) per arm; right: the multiplier against compute
    (log-log) per comparison: filled points are readings with their interval, open triangles
    bounds (up: at least, down: at most), a square the extrapolated multiplier."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.2))
    arms = list(ladder.arms)
    cmap = plt.get_cmap("tab10")
    color = {arm: cmap(i % cmap.N) for i, arm in enumerate(arms)}
    computes = [r.compute for r in ladder.rungs]
    low, top = min(computes), max(computes)
    reach = top * ladder.extrapolate_factor
    for arm, fitted in ladder.arms.items():
        points = fitted.points
        left.scatter(points["compute"], points["value"], s=16, alpha=0.7, color=color[arm])
        label = arm if len(arm) <= 40 else arm[:37] + "..."
        if fitted.fit is None:
            left.plot([], [], color=color[arm], label=f"{label} (no fit)")
            continue
        law = fitted.fit.pooled
        inside = np.geomspace(low, top, 100)
        beyond = np.geomspace(top, reach, 50)
        left.plot(
            inside, law.loss(inside), color=color[arm], label=f"{label}: α={law.exponent:.2f}"
        )
        left.plot(beyond, law.loss(beyond), color=color[arm], linestyle="--")
    left.set_xscale("log")
    left.set_xlabel(f"training compute ({ladder.compute_unit})")
    left.set_ylabel(f"final {ladder.metric}")
    left.set_title("Each arm against compute: seeds as points, the law fitted to all seeds")
    left.legend(fontsize=7)
    left.grid(True, which="both", alpha=0.3)
    for result in ladder.results:
        c = color[result.arm]
        rungs = result.rungs
        if not len(rungs):
            continue
        value = rungs["compute_x"].astype(float)
        readings = value.notna()
        errors = np.vstack(
            [
                (value - rungs["compute_x_low"]).where(readings).fillna(0.0),
                (rungs["compute_x_high"] - value).where(readings).fillna(0.0),
            ]
        ).clip(min=0.0)
        right.errorbar(
            rungs["compute"][readings],
            value[readings],
            yerr=errors[:, readings.to_numpy()],
            fmt="o-",
            color=c,
            capsize=3,
            label=result.arm if len(result.arm) <= 40 else result.arm[:37] + "...",
        )
        for where, marker in (("beyond", "^"), ("before", "v")):
            bound = rungs["compute_x_where"] == where
            right.scatter(
                rungs["compute"][bound],
                rungs["compute_x_bound"][bound],
                marker=marker,
                facecolors="none",
                edgecolors=c,
            )
        r = result.result
        if r is not None and r.extrapolation_supported and r.where == "inside" and math.isfinite(r.extrapolated_multiplier.value):  # fmt: skip
            e = r.extrapolated_multiplier
            spread = [[e.value - e.low], [e.high - e.value]] if math.isfinite(e.low) else None
            right.errorbar(
                [r.extrapolated_to], [e.value], yerr=spread, fmt="s", mfc="none", color=c, capsize=3
            )
    right.axhline(1.0, color="grey", linewidth=0.8)
    right.axvline(top, color="grey", linewidth=0.6, linestyle=":")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel(f"training compute ({ladder.compute_unit})")
    right.set_ylabel(f"compute multiplier against {ladder.baseline}")
    right.set_title(
        f"Multiplier per rung; square: extrapolated to {ladder.extrapolate_factor:g}× the top rung"
    )
    right.legend(fontsize=7)
    right.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig
