"""The effect of a variant in compute: its effective compute multiplier against the baseline.

A variant's multiplier is the compute at which the baseline's validation curve reaches the
variant's final objective, divided by the compute the variant spent: 1.2× means the baseline
needs 20% more compute for the same result. docs/statistics.md gives the method and its limits.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy import stats

Where = Literal["inside", "beyond", "before", "mixed", "none"]


@dataclass(frozen=True)
class Multiplier:
    """The geometric mean over seeds of the per-seed multipliers, with a t interval on their
    logarithms at `level`. `where`: `inside` the baseline's curve; `beyond` it (the variant
    ends better than the baseline ever got: the figures are lower bounds, the baseline's
    whole budget over the variant's); `before` it (worse than the baseline's first
    evaluation: upper bounds); `mixed` when some seeds give lower bounds and others upper
    bounds (their mean bounds nothing); `none` when nothing could be read. `readings`: each
    input's log multiplier and where it was read, by its label (a seed)."""

    value: float
    low: float
    high: float
    where: Where
    n: int
    readings: dict[Hashable, tuple[float, Where]] = field(default_factory=dict)


def reach(
    curve_x: np.ndarray, curve_y: np.ndarray, target: float, maximize: bool = False
) -> tuple[float, Where]:
    """The first x at which the curve (x increasing) reaches `target`.

    Interpolated between the two evaluations that bracket the first crossing, linearly in
    log x: a loss curve is close to a straight line against log compute, and a line drawn in
    linear x between two evaluations lies above the curve's convex sweep, reading compute up
    to about 10% high on the study's curves. An evaluation at x = 0 falls back to linear x. A
    target never reached gives the last x and `beyond`; one reached at the first point (the
    curve starts there already) gives the first x and `before`, unless it is met exactly.
    """
    x, y = np.asarray(curve_x, dtype=float), np.asarray(curve_y, dtype=float)
    sign = -1.0 if maximize else 1.0  # compare as a minimized objective
    ys, t = sign * y, sign * target
    reached = np.nonzero(ys <= t)[0]
    if len(reached) == 0:
        return float(x[-1]), "beyond"
    i = int(reached[0])
    if i == 0:
        return float(x[0]), "inside" if ys[0] == t else "before"
    x0, x1, y0, y1 = x[i - 1], x[i], ys[i - 1], ys[i]
    fraction = (t - y0) / (y1 - y0)
    if x0 > 0:
        return float(math.exp(math.log(x0) + fraction * (math.log(x1) - math.log(x0)))), "inside"
    return float(x0 + fraction * (x1 - x0)), "inside"


def compute_multiplier(
    curves: Sequence[tuple[np.ndarray, np.ndarray]],
    finals: np.ndarray,
    spent: np.ndarray,
    *,
    maximize: bool = False,
    level: float = 0.95,
    labels: Sequence[Hashable] | None = None,
) -> Multiplier:
    """The multiplier of a variant whose seeds ended at `finals` after spending `spent` (same
    unit as the curves' x: FLOPs, tokens or steps), each read off its own baseline curve
    (`curves[i]` = (x, y) for `finals[i]`): the same seed's curve when the baseline ran it, so
    that the interval carries the baseline's seed noise as well as the variant's. `labels`
    name the inputs in `Multiplier.readings` (their indices by default)."""
    finals, spent = np.asarray(finals, dtype=float), np.asarray(spent, dtype=float)
    keep = [
        i
        for i in range(len(finals))
        if len(curves[i][0]) and not np.isnan([finals[i], spent[i]]).any()
    ]
    if not keep:
        return Multiplier(math.nan, math.nan, math.nan, "none", 0)
    readings = [reach(*curves[i], finals[i], maximize) for i in keep]
    logs = np.log([x for x, _ in readings] / spent[keep])
    names = list(range(len(finals))) if labels is None else list(labels)
    by_label = {
        names[i]: (float(log), w) for i, log, (_, w) in zip(keep, logs, readings, strict=True)
    }
    wheres = {w for _, w in readings}
    where: Where = (
        "mixed"
        if {"beyond", "before"} <= wheres
        else "beyond"
        if "beyond" in wheres
        else "before"
        if "before" in wheres
        else "inside"
    )
    value = float(np.exp(logs.mean()))
    if len(logs) < 2 or float(np.std(logs, ddof=1)) == 0.0:
        return Multiplier(value, math.nan, math.nan, where, len(logs), by_label)
    half = (
        stats.t.ppf(0.5 + level / 2.0, len(logs) - 1) * np.std(logs, ddof=1) / math.sqrt(len(logs))
    )
    return Multiplier(
        value,
        float(np.exp(logs.mean() - half)),
        float(np.exp(logs.mean() + half)),
        where,
        len(logs),
        by_label,
    )
