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
So an extrapolation is reported only where its interval's coverage, simulated at the ladder's
own rungs and noise, holds (`extrapolation_coverage`). The trend across the rungs is tested on
the paired difference in the metric, which every rung has (`compare_on_ladder`).
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
    """For each exponent exp(log_alphas[..., k]), the least squares E + A'·exp(−α·x) ≈ y under
    E ≥ 0, A' ≥ 0, and its residual sum of squares: three arrays of shape (..., k).

    x: shape (n,); y: shape (n,) or (..., n), one row per set of points (a ladder's seed);
    log_alphas: shape (k,), one grid for every row, or (..., k), a grid per row. The
    non-negative least squares of two unknowns in closed form, for every row and exponent at
    once: the unconstrained solution where it is feasible, else the better of the two faces
    (E = 0 with A' ≥ 0, or A' = 0 with E ≥ 0), one of which holds the optimum of a convex
    quadratic whose minimum lies outside the quadrant.
    """
    g = np.exp(-np.exp(log_alphas)[..., None] * x)  # (..., k, n)
    y_mean = y.mean(axis=-1, keepdims=True)  # (..., 1)
    yc = y - y_mean
    g_mean = g.mean(axis=-1)
    gc = g - g_mean[..., None]
    # One grid for every row: matrix products, with no (rows, k, n) temporary.
    shared = g.ndim == 2

    def over_points(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return b @ a.T if shared else np.einsum("...kn,...n->...k", a, b)

    sgy = over_points(gc, yc)
    sgg = np.einsum("...kn,...kn->...k", gc, gc)
    syy = np.einsum("...n,...n->...", yc, yc)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.nan_to_num(sgy / sgg)
    free_e, free_a = y_mean - slope * g_mean, slope
    free_rss = np.maximum(syy - slope * sgy, 0.0)
    gy = over_points(g, y)
    gg = np.einsum("...kn,...kn->...k", g, g)
    through_zero = np.maximum(gy / gg, 0.0)  # the face E = 0
    zero_rss = np.einsum("...n,...n->...", y, y)[..., None] - through_zero * gy
    flat = np.maximum(y_mean, 0.0)  # the face A' = 0
    flat_rss = syy + y.shape[-1] * (y_mean - flat) ** 2
    use_zero = zero_rss <= flat_rss
    feasible = (free_e >= 0) & (free_a >= 0)
    e = np.where(feasible, free_e, np.where(use_zero, 0.0, flat))
    a = np.where(feasible, free_a, np.where(use_zero, through_zero, 0.0))
    rss = np.where(feasible, free_rss, np.where(use_zero, zero_rss, flat_rss))
    return e, a, rss


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
    points: dict[int, tuple[np.ndarray, np.ndarray]]
    """The points fitted: seed -> (compute per rung, loss per rung), each shape (rungs,)."""


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
        points={
            s: (np.asarray(c, dtype=float), np.asarray(y, dtype=float))
            for s, (c, y) in sorted(points.items())
        },
    )


COVERAGE_TOLERANCE = 0.05
"""An extrapolated multiplier is reported only where its interval's coverage, simulated at the
ladder's own rungs and noise (`extrapolation_coverage`), is at least the level less this
(90 % for a 95 % interval); otherwise the ladder is said not to support it."""
COVERAGE_SIMULATIONS = 2000  # Monte-Carlo sd of a coverage near 90 %: 0.7 points
_COVERAGE_SEED = 20240545  # the coverage simulation's own RNG: the same ladder, the same figure


@dataclass(frozen=True)
class LadderComparison:
    """A variant against the baseline across a ladder (docs/statistics.md, "Ladders").

    `exponent_difference`: variant minus baseline, paired by seed. `extrapolated_multiplier`:
    at `extrapolated_to` (a multiple of the top rung's compute), the compute at which the
    baseline's law reaches the variant's loss over that compute, per seed (paired), as the
    geometric mean with a t interval of the logarithms, as `compute.compute_multiplier`'s.
    `where`: `inside` when every seed's baseline law reaches the variant's loss; `beyond` when
    one never does (the variant's loss is below the baseline's irreducible loss): the
    multiplier is then unbounded, `value` and `high` infinite and `low` NaN.
    `extrapolation_coverage`: how often that interval held the true multiplier on ladders
    simulated at this ladder's rungs, seeds and noise (`extrapolation_coverage`);
    `extrapolation_supported`: whether it is within `COVERAGE_TOLERANCE` of the level, the
    condition for reporting the extrapolation. `trend_slope`: the mean over seeds of the OLS
    slope of the per-rung paired difference (variant − baseline, in the metric) on log
    compute, with its t interval; `trend_p` its one-sample t-test's two-sided p-value; `trend`
    the verdict at the level, oriented by `maximize`: `grows` when the difference moves in the
    variant's favour with compute. `crossing`: the compute at which the pooled laws cross, the
    lowest inside `crossing_range`, or None.
    """

    exponent_difference: Estimate
    extrapolated_multiplier: Estimate
    extrapolated_to: float
    where: Where
    extrapolation_coverage: float
    extrapolation_supported: bool
    trend_slope: Estimate
    trend_p: float
    trend: Trend
    trend_points: tuple[int, int]
    """The fewest and the most points a seed's slope was fitted on (each slope has that many
    less 2 residual degrees of freedom; the t-test over seeds has `trend_slope.n` − 1)."""
    crossing: float | None
    crossing_range: tuple[float, float]
    trend_p_adj: float = math.nan
    """`trend_p` Holm-corrected over the ladder's tested trends (`holm_trends`); `trend` is
    decided by it once set."""


def _verdict(slope: float, p: float, level: float, maximize: bool) -> Trend:
    """The trend's verdict from the slope of variant − baseline: `grows` when it moves in the
    variant's favour (up for a maximized metric, down for a minimized one)."""
    if not p < 1.0 - level:
        return "no trend detected"
    return "grows" if (slope > 0) == maximize else "shrinks"


def holm_trends(
    comparisons: list[LadderComparison], level: float = 0.95, maximize: bool = False
) -> list[LadderComparison]:
    """`comparisons` (one ladder's, each arm against the baseline) with their trend tests
    Holm-corrected together: the family is the trends that were tested (a finite p), and each
    verdict is decided at the corrected p, as a table's rows are."""
    tested = [i for i, c in enumerate(comparisons) if math.isfinite(c.trend_p)]
    adjusted = dict.fromkeys(range(len(comparisons)), math.nan)
    if tested:
        corrected = multipletests([comparisons[i].trend_p for i in tested], method="holm")[1]
        adjusted.update(zip(tested, (float(p) for p in corrected), strict=True))
    return [
        replace(c, trend_p_adj=adjusted[i], trend=_verdict(c.trend_slope.value, adjusted[i], level, maximize))
        for i, c in enumerate(comparisons)
    ]  # fmt: skip


def compare_on_ladder(
    baseline: ArmFit,
    variant: ArmFit,
    rung_differences: Mapping[int, np.ndarray],
    rung_compute: np.ndarray,
    *,
    extrapolate_factor: float,
    level: float = 0.95,
    maximize: bool = False,
    crossing_range: tuple[float, float] | None = None,
    simulations: int = COVERAGE_SIMULATIONS,
) -> LadderComparison:
    """Compare two fitted arms (see `LadderComparison`).

    rung_differences: seed -> shape (rungs,), the paired difference variant − baseline of the
    final metric at each rung (NaN where the seed lacks a run: left out of that seed's slope);
    rung_compute: shape (rungs,), each rung's compute (the baseline's, where the arms' differ):
    the x of the trend, and its top sets `extrapolated_to`.
    extrapolate_factor: the multiplier is read at this multiple of the top rung's compute.
    maximize: whether a higher metric is better (orients the trend's verdict).
    crossing_range: where a crossing is looked for; by default from the bottom rung to
    `extrapolated_to`. simulations: the ladders `extrapolation_coverage` simulates (0: none,
    the coverage NaN and the extrapolation not supported). Raises ValueError when the arms
    share no seed or the factor is not positive.
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
    multiplier, where = extrapolated_multiplier(base, var, at, level)
    coverage = extrapolation_coverage(baseline, variant, at, level, simulations)
    slope, p, points = _trend(rung_differences, compute, level)
    span = crossing_range if crossing_range is not None else (float(compute.min()), at)
    return LadderComparison(
        exponent_difference=exponent_difference,
        extrapolated_multiplier=multiplier,
        extrapolated_to=at,
        where=where,
        extrapolation_coverage=coverage,
        extrapolation_supported=coverage >= level - COVERAGE_TOLERANCE,
        trend_slope=slope,
        trend_p=p,
        trend=_verdict(slope.value, p, level, maximize),
        trend_points=points,
        crossing=crossing(baseline.pooled, variant.pooled, span),
        crossing_range=span,
    )


def extrapolated_multiplier(
    baseline: list[PowerLaw], variant: list[PowerLaw], at: float, level: float
) -> tuple[Estimate, Where]:
    """The multiplier at compute `at` of paired per-seed laws (`LadderComparison`) and where
    it was read."""
    reached = [b.compute_for(float(v.loss(at))) for v, b in zip(variant, baseline, strict=True)]
    if all(math.isfinite(r) for r in reached):
        return _exp(t_estimate(np.log(np.array(reached) / at), level)), "inside"
    return Estimate(math.inf, math.nan, math.inf, len(reached)), "beyond"


def _trend(
    rung_differences: Mapping[int, np.ndarray], rung_compute: np.ndarray, level: float
) -> tuple[Estimate, float, tuple[int, int]]:
    """The per-seed OLS slopes of the paired difference on log compute (the rungs the seed ran
    in both arms; a seed needs two distinct computes), their mean with its t interval, the
    p-value of their one-sample t-test (`t_test`), and the fewest and most points a slope was
    fitted on ((0, 0) without one). Every rung a seed ran enters its slope, whatever the
    difference reads: no rung is chosen by its outcome."""
    log_c = np.log(np.asarray(rung_compute, dtype=float))
    slopes, counts = [], []
    for differences in rung_differences.values():
        y = np.asarray(differences, dtype=float)
        keep = np.isfinite(y)
        if len(np.unique(log_c[keep])) < 2:
            continue
        # Equal readings have slope 0 exactly, which a least-squares solve gets only to rounding.
        flat = float(np.ptp(y[keep])) == 0.0
        slopes.append(0.0 if flat else float(ols_slopes(log_c[keep], y[keep])))
        counts.append(int(keep.sum()))
    estimate, p = t_test(slopes, level)
    return estimate, p, (min(counts, default=0), max(counts, default=0))


def trend_p_values(differences: np.ndarray, rung_compute: np.ndarray) -> np.ndarray:
    """The trend test's p-values for many complete ladders at once: differences shape
    (..., seeds, rungs), the paired differences of each seed at each rung; the result has the
    leading shape (...). The same test as `compare_on_ladder`'s (per-seed OLS slopes on log
    compute, a one-sample t-test over seeds), vectorised for simulation."""
    slopes = ols_slopes(np.log(np.asarray(rung_compute, dtype=float)), differences)
    return np.asarray(stats.ttest_1samp(slopes, 0.0, axis=-1).pvalue)


def extrapolation_coverage(
    baseline: ArmFit,
    variant: ArmFit,
    at: float,
    level: float = 0.95,
    simulations: int = COVERAGE_SIMULATIONS,
    seed: int = _COVERAGE_SEED,
) -> float:
    """How often the extrapolated multiplier's interval at compute `at` holds the truth on
    ladders like this one: `simulations` ladders whose arms follow the two pooled laws (the
    truth) at each arm's own rung computes, with the seeds the arms share and each run's final
    loss off its law by normal noise of the arms' seed sds and their correlation within a seed
    (pooled over the rungs, from the points fitted), each fitted and read as
    `compare_on_ladder` does. A reading covers when the truth is finite and inside its finite
    interval, or when both are unbounded (`beyond`); a simulated fit that fails covers nothing.

    NaN where no interval can be had or judged: fewer than 2 shared seeds, fewer than 2 seeds
    that ran every rung of both arms to estimate the noise from, or no simulation asked for. 1 for noise-free
    points (every simulated ladder is the fitted one; noise below 1e-9 of the loss counts as
    none, rounding). Seeded: the same ladder gives the same
    figure. docs/statistics.md, "Ladders", gives the rule built on it.
    """
    seeds = sorted(set(baseline.per_seed) & set(variant.per_seed))
    (base_c, base_y), (var_c, var_y) = _complete(baseline, seeds), _complete(variant, seeds)
    complete = sorted(set(base_y) & set(var_y))
    if len(seeds) < 2 or len(complete) < 2 or simulations < 1:
        return math.nan
    yb = np.array([base_y[s] for s in complete])  # (seeds, rungs)
    yv = np.array([var_y[s] for s in complete])
    rb, rv = yb - yb.mean(axis=0), yv - yv.mean(axis=0)
    dof = len(complete) - 1
    sd_b = math.sqrt(float(np.sum(rb**2)) / (dof * rb.shape[1]))
    sd_v = math.sqrt(float(np.sum(rv**2)) / (dof * rv.shape[1]))
    # Noise below the fits' own precision (1e-6 in log α) is rounding: the ladder is exact.
    if max(sd_b, sd_v) <= 1e-9 * float(np.abs(yb).mean()):
        return 1.0
    # The arms' runs of one seed at one rung share its batches: their noise is correlated.
    rho = 0.0
    if rb.shape == rv.shape and sd_b > 0 and sd_v > 0:
        rho = float(np.sum(rb * rv)) / (dof * rb.shape[1] * sd_b * sd_v)
    rng = np.random.default_rng(seed)
    shape = (simulations, len(seeds))
    z_b = rng.standard_normal((*shape, len(base_c)))
    z_v = rng.standard_normal((*shape, len(var_c)))
    if rho:
        z_v = rho * z_b + math.sqrt(max(1.0 - rho**2, 0.0)) * z_v
    truth = baseline.pooled.compute_for(float(variant.pooled.loss(at)))
    log_m, read = _simulated_log_multipliers(
        (base_c, baseline.pooled.loss(base_c) + sd_b * z_b),
        (var_c, variant.pooled.loss(var_c) + sd_v * z_v),
        at,
    )
    if not math.isfinite(truth):
        return float(np.mean(read & np.isinf(log_m).any(axis=1)))
    finite = read & np.isfinite(log_m).all(axis=1)
    with np.errstate(invalid="ignore"):
        mean, sd = log_m.mean(axis=1), log_m.std(axis=1, ddof=1)
    half = stats.t.ppf(0.5 + level / 2.0, len(seeds) - 1) * sd / math.sqrt(len(seeds))
    inside = np.abs(mean - math.log(truth / at)) <= half
    return float(np.mean(finite & inside))


def _complete(arm: ArmFit, seeds: list[int]) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The arm's rung computes (every distinct compute its points have) and, for each of
    `seeds` that ran them all, its losses at them: shape (rungs,)."""
    compute = np.unique(np.concatenate([arm.points[s][0] for s in seeds]))
    losses = {}
    for s in seeds:
        c, y = arm.points[s]
        order = np.argsort(c)
        if np.array_equal(c[order], compute):
            losses[s] = y[order]
    return compute, losses


def _simulated_log_multipliers(
    baseline: tuple[np.ndarray, np.ndarray], variant: tuple[np.ndarray, np.ndarray], at: float
) -> tuple[np.ndarray, np.ndarray]:
    """The log multiplier at `at` of many simulated ladders' paired seeds, and whether every
    seed of a ladder could be fitted. baseline, variant: (compute shape (rungs,), losses shape
    (ladders, seeds, rungs)). Returns log multipliers shape (ladders, seeds), +inf where the
    baseline's law never reaches the variant's loss, and a mask shape (ladders,)."""
    laws = []
    for compute, losses in (baseline, variant):
        log_c0 = float(np.log(compute).mean())
        e, log_a, alpha, ok = _fit_many(np.log(compute) - log_c0, losses)
        laws.append((e, log_a + alpha * log_c0, alpha, ok))
    (e_b, log_a_b, alpha_b, ok_b), (e_v, log_a_v, alpha_v, ok_v) = laws
    target = e_v + np.exp(log_a_v - alpha_v * math.log(at))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_reached = (log_a_b - np.log(target - e_b)) / alpha_b
    log_m = np.where(target > e_b, log_reached - math.log(at), math.inf)
    return log_m, (ok_b & ok_v).all(axis=1)


def _fit_many(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """`fit_power_law` for many sets of points at one set of (centred log) computes x, shape
    (n,): y shape (..., n). Every fourth point of the same grid, then four rounds of a 41-point
    grid between the best point's neighbours (to 1e-6 in log α) in place of Brent's method, which does not
    vectorise. Returns E, log A' (the scale of exp(−α·x)), α and whether the fit holds (its
    optimum off the search bounds, the loss falling), each shape (...)."""
    grid = np.linspace(math.log(EXPONENT_BOUNDS[0]), math.log(EXPONENT_BOUNDS[1]), _GRID_POINTS)
    coarse = grid[::4]  # then refined: 0.08 apart in log α, the residual has one minimum there
    _, _, rss = _projection(x, y, coarse)
    best = np.argmin(rss, axis=-1)
    ok = (best > 0) & (best < len(coarse) - 1)
    step = coarse[1] - coarse[0]
    centre = coarse[best]
    for _ in range(4):
        local = centre[..., None] + np.linspace(-step, step, 41)
        _, _, rss = _projection(x, y, local)
        centre = np.take_along_axis(local, np.argmin(rss, axis=-1)[..., None], axis=-1)[..., 0]
        step /= 20.0
    e, a, _ = (v[..., 0] for v in _projection(x, y, centre[..., None]))
    with np.errstate(divide="ignore"):
        log_a = np.log(a)
    return e, log_a, np.exp(centre), ok & (a > 0)


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
