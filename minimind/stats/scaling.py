"""The statistics of a model ladder: a power law of the loss against compute per arm, with
intervals over seeds, and the comparison of two arms across scale.

Each seed's final losses over the rungs are fitted by L(C) = E + A·C^(−α) (Hoffmann et al.
2022's approach 3) by variable projection: for a fixed α the model is linear in E and A, which
a non-negative least squares gives exactly (E ≥ 0, A ≥ 0), so the fit is a one-dimensional
search of the residual over α (a grid in log α, then Brent's bounded method between the grid
points around its minimum). Nothing is started from a guess and nothing stops early (Besiroglu
et al. 2024 traced the published approach-3 estimates they could not reproduce to an optimiser
that stopped early); noise-free data give back the true law (to 1e-6 in the tests). Residuals
are in loss (bits per byte), not log-loss: the seed noise of the final loss is taken as
constant over the 2.2–3.0 bpb a ladder spans (log-loss would weight its rungs within a factor
of (3.0/2.2)² of each other anyway), so least squares in loss is the maximum-likelihood fit,
and only in loss are E and A linear, which the projection needs.

Intervals are t intervals over seeds of the per-seed fits (each seed's ladder is an independent
replicate), the differences between arms paired by seed. docs/statistics.md, "Ladders", gives
the method, its precision on synthetic ladders of the study's noise and the coverage of each
interval. In short, on ladders from 1.2e12 to 1.1e15 FLOPs with 5 seeds per arm: α is within
±0.02 in 95 % of ladders at a seed sd up to 0.010 bpb (the study's median) from 4 rungs, and
at 0.015 only about so at 8. The multiplier is within ±3 % at the top rung only where the arms'
seeds move together (a paired sd near 0.001, from 4 rungs); at the study's median paired sd
(0.014) it is good to about ±13–18 % there and ±43–72 % at 10× the top rung (8 to 4 rungs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, stats
from statsmodels.stats.multitest import multipletests

EXPONENT_BOUNDS = (1e-3, 4.0)
"""The exponents the fit searches. An optimum at either end is no fit: the losses do not bend
like a power law over the computes given (flat, straight in log compute, or concave)."""
_GRID_POINTS = 400  # log-spaced α between the bounds: 0.02 apart in log α

Where = Literal["inside", "beyond"]
Trend = Literal["grows", "shrinks", "no trend detected"]


@dataclass(frozen=True)
class PowerLaw:
    """L(C) = irreducible + scale · C^(−exponent), C the training compute (FLOPs)."""

    irreducible: float
    scale: float
    exponent: float

    def loss(self, compute: ArrayLike) -> np.ndarray:
        """The loss at each compute (any shape; computed in logs, so no power overflows)."""
        c = np.asarray(compute, dtype=float)
        return self.irreducible + np.exp(math.log(self.scale) - self.exponent * np.log(c))

    def compute_for(self, loss: float) -> float:
        """The compute at which the law reaches `loss`; `math.inf` if it never does (a loss at
        or below the irreducible one)."""
        if loss <= self.irreducible:
            return math.inf
        log_c = (math.log(self.scale) - math.log(loss - self.irreducible)) / self.exponent
        return math.exp(log_c) if log_c < 709.0 else math.inf


def fit_power_law(compute: ArrayLike, loss: ArrayLike) -> PowerLaw:
    """The least-squares power law (residuals in loss) through the points (compute[i], loss[i]),
    by variable projection (module docstring). compute, loss: shape (n,), compute > 0; repeated
    computes (several seeds of a rung) are fine.

    Raises ValueError with a one-line reason: fewer than 3 distinct computes (three parameters;
    with exactly 3 the law passes through the points, 0 degrees of freedom), points that are not
    finite, or losses that no power law with α inside `EXPONENT_BOUNDS` fits (the optimum lies
    at a bound, or the loss does not fall with compute).
    """
    c, y = np.asarray(compute, dtype=float), np.asarray(loss, dtype=float)
    if c.ndim != 1 or c.shape != y.shape:
        raise ValueError(f"compute and loss must be two 1-D arrays of one length, got shapes {c.shape} and {y.shape}")  # fmt: skip
    if not (np.isfinite(c).all() and np.isfinite(y).all()) or (c <= 0).any():
        raise ValueError("compute must be positive and finite, and every loss finite")
    distinct = len(np.unique(c))
    if distinct < 3:
        raise ValueError(f"a power law E + A·C^-α needs losses at 3 or more distinct computes, got {distinct}")  # fmt: skip
    # Centred log compute: the basis (C / C0)^-α is of order 1 at every rung, so the linear
    # solve is well conditioned whatever the FLOPs' magnitude.
    log_c0 = float(np.log(c).mean())
    x = np.log(c) - log_c0

    def residual(log_alpha: float) -> float:
        return float(_projection(x, y, np.array([log_alpha]))[2][0])

    grid = np.linspace(math.log(EXPONENT_BOUNDS[0]), math.log(EXPONENT_BOUNDS[1]), _GRID_POINTS)
    _, scaled_on_grid, residuals = _projection(x, y, grid)
    if not (scaled_on_grid > 0).any():
        raise ValueError("no power law fits these losses: the loss does not fall with compute")
    best = int(np.argmin(residuals))
    if best in (0, len(grid) - 1):
        raise ValueError(f"no power law fits these losses: the best exponent lies at the search bound {math.exp(grid[best]):g} (they do not bend as E + A·C^-α does over these computes)")  # fmt: skip
    found = optimize.minimize_scalar(
        residual,
        bounds=(grid[best - 1], grid[best + 1]),
        method="bounded",
        options={"xatol": 1e-12},
    )
    log_alpha = float(found.x) if found.fun <= residual(grid[best]) else float(grid[best])
    irreducible, scaled, _ = (float(v[0]) for v in _projection(x, y, np.array([log_alpha])))
    if not scaled > 0:  # a flat line fits as well as any power law
        raise ValueError("no power law fits these losses: the loss does not fall with compute")
    alpha = math.exp(log_alpha)
    # (C / C0)^-α = C^-α · C0^α: back to the scale of C itself.
    return PowerLaw(irreducible, scaled * math.exp(alpha * log_c0), alpha)


def _projection(
    x: np.ndarray, y: np.ndarray, log_alphas: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each exponent exp(log_alphas[k]), the least squares E + A'·exp(−α·x) ≈ y under
    E ≥ 0, A' ≥ 0, and its residual sum of squares: three arrays of shape (k,).

    x, y: shape (n,). The non-negative least squares of two unknowns in closed form, for every
    exponent at once: the unconstrained solution where it is feasible, else the better of the
    two faces (E = 0 with A' ≥ 0, or A' = 0 with E ≥ 0), one of which holds the optimum of a
    convex quadratic whose minimum lies outside the quadrant.
    """
    g = np.exp(-np.exp(log_alphas)[:, None] * x[None, :])  # (k, n)
    g_mean, y_mean = g.mean(axis=1), float(y.mean())
    gc = g - g_mean[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = (gc @ (y - y_mean)) / np.einsum("kn,kn->k", gc, gc)
    slope = np.nan_to_num(slope)
    free_e, free_a = y_mean - slope * g_mean, slope
    through_zero = np.maximum((g @ y) / np.einsum("kn,kn->k", g, g), 0.0)  # the face E = 0
    flat = max(y_mean, 0.0)  # the face A' = 0

    def rss(e: np.ndarray, a: np.ndarray) -> np.ndarray:
        return np.sum((y[None, :] - e[:, None] - a[:, None] * g) ** 2, axis=1)

    zeros = np.zeros(len(g))
    zero_rss, flat_rss = rss(zeros, through_zero), rss(np.full(len(g), flat), zeros)
    use_zero = zero_rss <= flat_rss
    feasible = (free_e >= 0) & (free_a >= 0)
    e = np.where(feasible, free_e, np.where(use_zero, 0.0, flat))
    a = np.where(feasible, free_a, np.where(use_zero, through_zero, 0.0))
    return e, a, rss(e, a)


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its t interval at the level asked for; `low` and `high` are NaN
    with fewer than 2 seeds (no spread known), and equal `value` when the seeds agree exactly."""

    value: float
    low: float
    high: float
    n: int


def t_estimate(values: ArrayLike, level: float = 0.95) -> Estimate:
    """The mean of `values` (one per seed) and its one-sample t interval at `level`."""
    return t_test(values, level)[0]


def t_test(values: ArrayLike, level: float = 0.95) -> tuple[Estimate, float]:
    """`t_estimate` and the two-sided p-value of the one-sample t-test of a zero mean: NaN with
    fewer than 2 values, 0 or 1 when they are all equal (nonzero or zero)."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean()) if len(v) else math.nan
    if len(v) < 2:
        return Estimate(mean, math.nan, math.nan, len(v)), math.nan
    if float(np.ptp(v)) == 0.0:  # all equal (a standard deviation may round above zero)
        return Estimate(mean, mean, mean, len(v)), 0.0 if mean else 1.0
    test = stats.ttest_1samp(v, 0.0)
    interval = test.confidence_interval(level)
    return Estimate(mean, float(interval.low), float(interval.high), len(v)), float(test.pvalue)


def _exp(estimate: Estimate) -> Estimate:
    """An estimate made on logarithms, back on the original scale (a geometric mean)."""
    return Estimate(
        math.exp(estimate.value), math.exp(estimate.low), math.exp(estimate.high), estimate.n
    )


@dataclass(frozen=True)
class ArmFit:
    """One arm's ladder: each seed's power law, the law fitted to all its seeds' points at once
    (`pooled`), and over seeds the mean exponent and irreducible loss and the geometric mean
    scale (positive, and skewed: α and A move together), each with its t interval."""

    per_seed: dict[int, PowerLaw]
    exponent: Estimate
    irreducible: Estimate
    scale: Estimate
    pooled: PowerLaw


def fit_arm(points: Mapping[int, tuple[np.ndarray, np.ndarray]], level: float = 0.95) -> ArmFit:
    """Fit each seed's ladder: `points[seed] = (compute per rung, final loss per rung)`, both
    shape (rungs,). Raises ValueError naming the seed whose ladder cannot be fitted."""
    if not points:
        raise ValueError("a ladder fit needs at least one seed's points")
    per_seed: dict[int, PowerLaw] = {}
    for seed, (compute, loss) in sorted(points.items()):
        try:
            per_seed[seed] = fit_power_law(compute, loss)
        except ValueError as e:
            raise ValueError(f"seed {seed}: {e}") from e
    laws = list(per_seed.values())
    try:
        pooled = fit_power_law(
            np.concatenate([np.asarray(c, dtype=float) for c, _ in points.values()]),
            np.concatenate([np.asarray(y, dtype=float) for _, y in points.values()]),
        )
    except ValueError as e:
        raise ValueError(f"all seeds together: {e}") from e
    return ArmFit(
        per_seed=per_seed,
        exponent=t_estimate([law.exponent for law in laws], level),
        irreducible=t_estimate([law.irreducible for law in laws], level),
        scale=_exp(t_estimate([math.log(law.scale) for law in laws], level)),
        pooled=pooled,
    )


@dataclass(frozen=True)
class LadderComparison:
    """A variant against the baseline across a ladder (docs/statistics.md, "Ladders").

    `exponent_difference`: variant minus baseline, paired by seed. `extrapolated_multiplier`:
    at `extrapolated_to` (a multiple of the top rung's compute), the compute at which the
    baseline's law reaches the variant's loss over that compute, per seed (paired), as the
    geometric mean with a t interval of the logarithms, as `compute.compute_multiplier`'s.
    `where`: `inside` when every seed's baseline law reaches the variant's loss; `beyond` when
    one never does (the variant's loss is below the baseline's irreducible loss): the
    multiplier is then unbounded, `value` and `high` infinite and `low` NaN. `trend_slope`:
    the mean over seeds of the OLS slope of the per-rung log multiplier on log compute, with
    its t interval; `trend_p` its one-sample t-test's two-sided p-value; `trend` the verdict at
    the level. `crossing`: the compute at which the pooled laws cross, the lowest inside
    `crossing_range`, or None.
    """

    exponent_difference: Estimate
    extrapolated_multiplier: Estimate
    extrapolated_to: float
    where: Where
    trend_slope: Estimate
    trend_p: float
    trend: Trend
    crossing: float | None
    crossing_range: tuple[float, float]
    trend_p_adj: float = math.nan
    """`trend_p` Holm-corrected over the ladder's tested trends (`holm_trends`); `trend` is
    decided by it once set."""


def holm_trends(comparisons: list[LadderComparison], level: float = 0.95) -> list[LadderComparison]:
    """`comparisons` (one ladder's, each arm against the baseline) with their trend tests
    Holm-corrected together: the family is the trends that were tested (a finite p), and each
    verdict is decided at the corrected p, as a table's rows are."""
    tested = [i for i, c in enumerate(comparisons) if math.isfinite(c.trend_p)]
    adjusted = dict.fromkeys(range(len(comparisons)), math.nan)
    if tested:
        corrected = multipletests([comparisons[i].trend_p for i in tested], method="holm")[1]
        adjusted.update(zip(tested, (float(p) for p in corrected), strict=True))
    out = []
    for i, c in enumerate(comparisons):
        p = adjusted[i]
        verdict: Trend = (
            "no trend detected" if not p < 1.0 - level else "grows" if c.trend_slope.value > 0
            else "shrinks"
        )  # fmt: skip
        out.append(replace(c, trend_p_adj=p, trend=verdict))
    return out


def compare_on_ladder(
    baseline: ArmFit,
    variant: ArmFit,
    rung_log_multipliers: Mapping[int, np.ndarray],
    rung_compute: np.ndarray,
    *,
    extrapolate_factor: float,
    level: float = 0.95,
    crossing_range: tuple[float, float] | None = None,
) -> LadderComparison:
    """Compare two fitted arms (see `LadderComparison`).

    rung_log_multipliers: seed -> shape (rungs,), the log of the compute multiplier measured at
    each rung (NaN or ±inf where none was read: left out of that seed's slope); rung_compute:
    shape (rungs,), each rung's compute (the baseline's, where the arms' differ): the x of the
    trend, and its top sets `extrapolated_to`.
    extrapolate_factor: the multiplier is read at this multiple of the top rung's compute.
    crossing_range: where a crossing is looked for; by default from the bottom rung to
    `extrapolated_to`. Raises ValueError when the arms share no seed or the factor is not
    positive.
    """
    if not extrapolate_factor > 0:
        raise ValueError(f"extrapolate_factor must be positive, got {extrapolate_factor}")
    seeds = sorted(set(baseline.per_seed) & set(variant.per_seed))
    if not seeds:
        raise ValueError("the baseline and the variant share no seed: nothing to pair")
    compute = np.asarray(rung_compute, dtype=float)
    at = extrapolate_factor * float(compute.max())
    base = [baseline.per_seed[s] for s in seeds]
    var = [variant.per_seed[s] for s in seeds]
    exponent_difference = t_estimate(
        [v.exponent - b.exponent for v, b in zip(var, base, strict=True)], level
    )
    reached = [b.compute_for(float(v.loss(at))) for v, b in zip(var, base, strict=True)]
    if all(math.isfinite(r) for r in reached):
        where: Where = "inside"
        multiplier = _exp(t_estimate(np.log(np.array(reached) / at), level))
    else:
        where = "beyond"
        multiplier = Estimate(math.inf, math.nan, math.inf, len(reached))
    slope, p = _trend(rung_log_multipliers, compute, level)
    verdict: Trend = (
        "no trend detected" if not p < 1.0 - level else "grows" if slope.value > 0 else "shrinks"
    )
    span = crossing_range if crossing_range is not None else (float(compute.min()), at)
    return LadderComparison(
        exponent_difference=exponent_difference,
        extrapolated_multiplier=multiplier,
        extrapolated_to=at,
        where=where,
        trend_slope=slope,
        trend_p=p,
        trend=verdict,
        crossing=crossing(baseline.pooled, variant.pooled, span),
        crossing_range=span,
    )


def _trend(
    rung_log_multipliers: Mapping[int, np.ndarray], rung_compute: np.ndarray, level: float
) -> tuple[Estimate, float]:
    """The per-seed OLS slopes of log multiplier on log compute (rungs with a reading; a seed
    needs two distinct computes), their mean with its t interval, and the p-value of their
    one-sample t-test (`t_test`)."""
    log_c = np.log(np.asarray(rung_compute, dtype=float))
    slopes = []
    for logs in rung_log_multipliers.values():
        y = np.asarray(logs, dtype=float)
        keep = np.isfinite(y)
        if len(np.unique(log_c[keep])) < 2:
            continue
        # Equal readings have slope 0 exactly, which a least-squares solve gets only to rounding.
        flat = float(np.ptp(y[keep])) == 0.0
        slopes.append(0.0 if flat else float(ols_slopes(log_c[keep], y[keep])))
    return t_test(slopes, level)


def ols_slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The least-squares slopes of y on x: x shape (points,), y shape (..., points); the slopes
    have y's leading shape (vectorised, so the trend test's error can be simulated on many
    ladders at once)."""
    centred = np.asarray(x, dtype=float) - np.mean(x)
    return np.asarray(np.asarray(y, dtype=float) @ centred / (centred @ centred))


def crossing(baseline: PowerLaw, variant: PowerLaw, span: tuple[float, float]) -> float | None:
    """The lowest compute inside `span` at which the two laws give the same loss, or None.

    The sign of their difference is scanned on a log grid (two power laws with a common
    compute cross at most twice: E_v − E_b + A_v·C^-α_v − A_b·C^-α_b changes sign at most twice,
    as the function over log C has at most one turning point), then the crossing is refined by
    Brent's method in log compute."""
    low, high = span
    if not 0 < low < high:
        raise ValueError(f"a crossing range needs 0 < low < high, got {span}")
    grid = np.linspace(math.log(low), math.log(high), 2049)
    sign = np.sign(variant.loss(np.exp(grid)) - baseline.loss(np.exp(grid)))
    signed = np.nonzero(sign)[0]  # laws that coincide everywhere never cross
    changes = np.nonzero(sign[signed[:-1]] != sign[signed[1:]])[0]
    if not len(changes):
        return None
    before, after = signed[changes[0]], signed[changes[0] + 1]

    def difference(log_c: float) -> float:
        return float(variant.loss(math.exp(log_c)) - baseline.loss(math.exp(log_c)))

    return float(math.exp(optimize.brentq(difference, grid[before], grid[after], xtol=1e-12)))
