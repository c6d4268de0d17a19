"""Power and sample size of the comparisons: the smallest difference a design detects, the seeds a
stated difference or equivalence margin needs, and how far the sd's own uncertainty moves them.

The one home of power in the project (docs/statistics.md, "Power"). Every figure is a numerical
calculation, never a statsmodels `solve_power` (which stops at wrong roots for small designs):

- A two-sided t-test's power is the noncentral t's tail mass beyond the critical value
  (`scipy.stats.nct`); the detectable difference is the noncentrality that reaches the power,
  found by a bracketed root finder (`scipy.optimize.brentq`) and checked.
- Equivalence (two one-sided tests, TOST: the interval at level 1 - alpha inside ±margin) has
  its power integrated over the chi-square distribution of the estimated variance.
- Seeds are the smallest n whose power reaches the goal, found by doubling then bisection (power
  grows with n).

Designs: `paired` (n pairs, `sd` the sd of the per-seed differences, n - 1 df), `unpaired`
(Student's t, n per arm, `sd` the seed-to-seed sd, n_v + n_b - 2 df) and `welch` (each arm its
own sd; Welch's test estimates both variances and its Welch–Satterthwaite df from them, so its
power is integrated over the two independent chi-square variance estimates, `welch_power`). `comparisons` k tests at alpha / k each: the Bonferroni level,
which is also the first (most demanding) step of Holm's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import integrate, optimize, stats

Design = Literal["paired", "unpaired", "welch"]
Goal = Literal["difference", "equivalence"]

ALPHA = 0.05
"""The family-wise error rate of a comparison."""
POWER = 0.8
MAX_SEEDS = 100_000
"""The largest design the seed searches consider; beyond it they answer None."""
POWER_TOLERANCE = 1e-6
"""How far the power at a solved detectable difference may sit from the asked power."""
WELCH_NODES = 128
"""Gauss–Legendre nodes per variance in Welch's power integral (over the chi-square quantiles);
the power it gives moves by less than 1e-4 from 128 to 512 nodes on the 2-10 seeds grid."""


def _check(sd: float, n: int, alpha: float, power: float) -> None:
    if not (0.0 < alpha < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha}, {power}")
    if not (sd > 0 and math.isfinite(sd)):
        raise ValueError(f"need a positive finite sd, got {sd}")
    if n < 2:
        raise ValueError(f"need at least 2 seeds, got {n}")


def per_test_alpha(alpha: float = ALPHA, comparisons: int = 1) -> float:
    """The alpha of each of `comparisons` tests: the Bonferroni level alpha / k."""
    if comparisons < 1:
        raise ValueError(f"need at least one comparison, got {comparisons}")
    return alpha / comparisons


def standard_error(
    n: int,
    sd: float,
    design: Design = "paired",
    n_baseline: int | None = None,
    sd_baseline: float | None = None,
) -> tuple[float, float]:
    """(the standard error of the difference, its degrees of freedom) for a design of `n` seeds
    (pairs, or the variant's runs) against `n_baseline` (default `n`) of sd `sd_baseline`
    (default `sd`; only Welch's uses it)."""
    m = n if n_baseline is None else n_baseline
    if design == "paired":
        return sd / math.sqrt(n), float(n - 1)
    if design == "unpaired":
        return sd * math.sqrt(1.0 / n + 1.0 / m), float(n + m - 2)
    s_b = sd if sd_baseline is None else sd_baseline
    v, b = sd * sd / n, s_b * s_b / m
    return math.sqrt(v + b), (v + b) ** 2 / (v * v / (n - 1) + b * b / (m - 1))


def t_test_power(noncentrality: float, df: float, alpha: float) -> float:
    """The power of a two-sided t-test at `alpha` with `df` degrees of freedom when the
    statistic's noncentrality is `noncentrality`: P(|T| > t_{1 - alpha/2}), T ~ nct(df, nc)."""
    return _power_beyond(float(stats.t.ppf(1.0 - alpha / 2.0, df)), df, noncentrality)


def _power_beyond(critical: float, df: float, noncentrality: float) -> float:
    """P(|T| > critical), T ~ nct(df, noncentrality)."""
    nc = abs(noncentrality)
    upper = float(stats.nct.sf(critical, df, nc))
    # The far tail P(T < -critical): scipy's nct returns NaN for some large noncentralities,
    # where the tail lies below the normal's P(Z < -nc) (T < -c needs Z + nc < 0); there it
    # is read through the mirror nct(-nc), or taken as 0 when the bound makes it negligible.
    lower = float(stats.nct.cdf(-critical, df, nc))
    if not math.isfinite(lower):
        lower = float(stats.nct.sf(critical, df, -nc))
    if not math.isfinite(lower) and float(stats.norm.cdf(-nc)) < 1e-12:
        lower = 0.0
    power = upper + lower
    if not math.isfinite(power):
        raise ArithmeticError(f"power undefined at noncentrality {nc}, {df} df")
    return min(1.0, power)


def difference_power(
    delta: float,
    n: int,
    sd: float,
    *,
    design: Design = "paired",
    n_baseline: int | None = None,
    sd_baseline: float | None = None,
    comparisons: int = 1,
    alpha: float = ALPHA,
) -> float:
    """The power of the two-sided test of a true difference `delta` in a family of
    `comparisons` (each at alpha / k)."""
    if design == "welch":
        m = n if n_baseline is None else n_baseline
        s_b = sd if sd_baseline is None else sd_baseline
        return welch_power(delta, n, sd, m, s_b, per_test_alpha(alpha, comparisons))
    se, df = standard_error(n, sd, design, n_baseline, sd_baseline)
    return t_test_power(delta / se, df, per_test_alpha(alpha, comparisons))


@functools.lru_cache(maxsize=1024)
def _chi2_nodes(df: int) -> tuple[np.ndarray, np.ndarray]:
    """(u/df, weights), shape (WELCH_NODES,) each: Gauss–Legendre nodes over the quantiles
    p in (0, 1) of u ~ chi²(df), so that E[f(u/df)] = sum(weights · f(u/df)) with a bounded
    integrand."""
    x, w = np.polynomial.legendre.leggauss(WELCH_NODES)
    p = (x + 1.0) / 2.0
    return stats.chi2.ppf(p, df) / df, w / 2.0


def welch_power(
    delta: float, n: int, sd: float, n_baseline: int, sd_baseline: float, alpha: float
) -> float:
    """The power of Welch's two-sided test at `alpha` of a true difference `delta` between `n`
    runs of sd `sd` and `n_baseline` runs of sd `sd_baseline`.

    Welch's test estimates both variances: s_i² = σ_i²·u_i/df_i, u_i ~ chi²(df_i), df_i = n_i - 1,
    independent. Given them, the estimated standard error and the Welch–Satterthwaite df are
    fixed, and the mean difference D ~ N(delta, σ_d²) (σ_d the true standard error) is
    independent of them, so the power is E[Φ((delta - c)/σ_d) + Φ((-c - delta)/σ_d)] with
    c = t_{1 - alpha/2, df̂}·se_est, integrated over (u_1, u_2) by 2-D Gauss–Legendre
    quadrature on their quantiles. A noncentral t with the true sds' df overstates it (0.70,
    not 0.80, at that MDE for 3 vs 3 seeds).
    """
    r_v, w_v = _chi2_nodes(n - 1)
    r_b, w_b = _chi2_nodes(n_baseline - 1)
    v = (sd * sd / n) * r_v[:, None]  # (nodes, 1): the variant's estimated variance of its mean
    b = (sd_baseline * sd_baseline / n_baseline) * r_b[None, :]  # (1, nodes)
    se_est = np.sqrt(v + b)  # (nodes, nodes)
    df_est = (v + b) ** 2 / (v * v / (n - 1) + b * b / (n_baseline - 1))
    cut = stats.t.ppf(1.0 - alpha / 2.0, df_est) * se_est
    sigma = math.sqrt(sd * sd / n + sd_baseline * sd_baseline / n_baseline)
    rejects = stats.norm.cdf((delta - cut) / sigma) + stats.norm.cdf((-cut - delta) / sigma)
    return min(1.0, float(w_v @ rejects @ w_b))


def detectable_difference(
    n: int,
    sd: float,
    *,
    design: Design = "paired",
    n_baseline: int | None = None,
    sd_baseline: float | None = None,
    comparisons: int = 1,
    alpha: float = ALPHA,
    power: float = POWER,
) -> float:
    """The minimum detectable difference (MDE): the true difference that the design's two-sided
    test at alpha / `comparisons` detects with `power`. NaN when the design has no spread or
    fewer than 2 seeds on a side."""
    m = n if n_baseline is None else n_baseline
    if not (sd > 0 and math.isfinite(sd)) or min(n, m) < 2:
        return math.nan
    if design == "welch" and sd_baseline is not None and not sd_baseline > 0:
        return math.nan
    _check(sd, min(n, m), alpha, power)
    se, df = standard_error(n, sd, design, n_baseline, sd_baseline)
    if design == "welch":
        return _welch_detectable(n, sd, m, sd if sd_baseline is None else sd_baseline,
                                 per_test_alpha(alpha, comparisons), power) * se  # fmt: skip
    return noncentrality_for_power(df, per_test_alpha(alpha, comparisons), power) * se


@functools.lru_cache(maxsize=4096)
def _welch_detectable(
    n: int, sd: float, n_baseline: int, sd_baseline: float, alpha: float, power: float
) -> float:
    """The difference, in units of the true standard error, at which `welch_power` is `power`:
    bracketed from the normal test's root (below it) upwards, solved by brentq and checked."""
    se = math.sqrt(sd * sd / n + sd_baseline * sd_baseline / n_baseline)

    def shortfall(z: float) -> float:
        return welch_power(z * se, n, sd, n_baseline, sd_baseline, alpha) - power

    low = 0.0
    high = float(stats.norm.ppf(1.0 - alpha / 2.0) + stats.norm.ppf(power))
    while shortfall(high) < 0:
        low, high = high, 2.0 * high
    z = float(optimize.brentq(shortfall, low, high, xtol=1e-10, rtol=1e-12))
    achieved = shortfall(z) + power
    if abs(achieved - power) > POWER_TOLERANCE:
        raise ArithmeticError(f"Welch MDE solver missed: power {achieved} at {z} se")
    return z


@functools.lru_cache(maxsize=4096)
def noncentrality_for_power(df: float, alpha: float, power: float = POWER) -> float:
    """The noncentrality at which a two-sided t-test at `alpha` with `df` degrees of freedom
    has `power`: the root of power(nc) - power, bracketed (the power grows with nc, and the
    normal test's root z_{1-alpha/2} + z_power is below the t-test's) and checked."""
    critical = float(stats.t.ppf(1.0 - alpha / 2.0, df))

    def shortfall(nc: float) -> float:
        return _power_beyond(critical, df, nc) - power

    low = float(stats.norm.ppf(1.0 - alpha / 2.0) + stats.norm.ppf(power))
    low = max(0.0, min(low, critical))
    high = max(2.0 * low, 1.0)
    while shortfall(high) < 0:
        low, high = high, 2.0 * high
    if shortfall(low) > 0:
        low = 0.0
    nc = float(optimize.brentq(shortfall, low, high, xtol=1e-10, rtol=1e-12))
    achieved = _power_beyond(critical, df, nc)
    if abs(achieved - power) > POWER_TOLERANCE:
        raise ArithmeticError(f"MDE solver missed: power {achieved} at noncentrality {nc}")
    return nc


def equivalence_power(
    margin: float,
    n: int,
    sd: float,
    *,
    true_delta: float = 0.0,
    design: Design = "paired",
    comparisons: int = 1,
    alpha: float = ALPHA,
) -> float:
    """The power of settling equivalence: the probability that the two-sided interval at level
    1 - alpha / `comparisons` (two one-sided tests, TOST, each at half that) lies inside
    ±`margin` when the true difference is `true_delta`.

    Exact: given the estimated sd s, the estimate D ~ N(true_delta, se²) must satisfy
    |D| + t·se·s/sd < margin; that probability is integrated over s²/sd² ~ chi²(df)/df,
    written as an integral over the chi-square's quantiles so that the integrand is bounded.
    """
    se, df = standard_error(n, sd, "paired" if design == "paired" else "unpaired")
    critical = float(stats.t.ppf(1.0 - per_test_alpha(alpha, comparisons) / 2.0, df))
    # The interval's half width is critical·se·sqrt(u/df), u ~ chi²(df): past u_max it alone
    # exceeds the margin and nothing is settled.
    u_max = df * (margin / (critical * se)) ** 2
    p_max = float(stats.chi2.cdf(u_max, df))
    if p_max <= 0.0:
        return 0.0

    def settled(p: float) -> float:
        half = critical * se * math.sqrt(float(stats.chi2.ppf(p, df)) / df)
        upper = stats.norm.cdf((margin - half - true_delta) / se)
        lower = stats.norm.cdf((-margin + half - true_delta) / se)
        return max(0.0, float(upper - lower))

    value, _ = integrate.quad(settled, 0.0, p_max, limit=200, epsabs=1e-10, epsrel=1e-8)
    return min(1.0, max(0.0, value))


def _smallest_n(reaches: Callable[[int], bool], max_seeds: int) -> int | None:
    """The smallest n >= 2 for which `reaches(n)` (monotone in n), or None past `max_seeds`."""
    if reaches(2):
        return 2
    low, high = 2, 4
    while not reaches(high):
        if high >= max_seeds:
            return None
        low, high = high, min(2 * high, max_seeds)
    while high - low > 1:  # reaches(high), not reaches(low)
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid, high)
    return high


def seeds_for_difference(
    effect: float,
    sd: float,
    *,
    design: Design = "paired",
    comparisons: int = 1,
    alpha: float = ALPHA,
    power: float = POWER,
    max_seeds: int = MAX_SEEDS,
) -> int | None:
    """Seeds per arm (pairs for `paired`) whose two-sided test at alpha / `comparisons` detects
    a true difference `effect` with `power`, when seeds vary by `sd` (paired: the sd of the
    per-seed differences; `welch`: both arms, whose variances Welch's test still estimates
    apart); at least 2, None beyond `max_seeds`."""
    if effect == 0 or not math.isfinite(effect):
        raise ValueError(f"need a nonzero finite effect, got {effect}")
    _check(sd, 2, alpha, power)
    return _smallest_n(
        lambda n: (
            difference_power(effect, n, sd, design=design, comparisons=comparisons, alpha=alpha)
            >= power
        ),
        max_seeds,
    )


def seeds_for_equivalence(
    margin: float,
    sd: float,
    *,
    true_delta: float = 0.0,
    design: Design = "paired",
    comparisons: int = 1,
    alpha: float = ALPHA,
    power: float = POWER,
    max_seeds: int = MAX_SEEDS,
) -> int | None:
    """Seeds per arm (pairs for `paired`) whose interval at level 1 - alpha / `comparisons`
    falls inside ±`margin` with `power` when the true difference is `true_delta` (TOST power,
    `equivalence_power`); at least 2, None beyond `max_seeds` or when |true_delta| >= margin
    (equivalence is then false and never settled with more than alpha's chance)."""
    if not (margin > 0 and math.isfinite(margin)):
        raise ValueError(f"need a positive finite margin, got {margin}")
    _check(sd, 2, alpha, power)
    if abs(true_delta) >= margin:
        return None
    return _smallest_n(
        lambda n: (
            equivalence_power(
                margin,
                n,
                sd,
                true_delta=true_delta,
                design=design,
                comparisons=comparisons,
                alpha=alpha,
            )
            >= power
        ),
        max_seeds,
    )


def sd_interval(sd: float, df: float, level: float = 0.95) -> tuple[float, float]:
    """The chi-square interval at `level` of a standard deviation estimated as `sd` with `df`
    degrees of freedom: df·s²/σ² ~ chi²(df)."""
    if not (df > 0 and sd >= 0):
        return math.nan, math.nan
    tail = (1.0 - level) / 2.0
    low = sd * math.sqrt(df / float(stats.chi2.ppf(1.0 - tail, df)))
    high = sd * math.sqrt(df / float(stats.chi2.ppf(tail, df)))
    return low, high


@dataclass(frozen=True)
class SeedsPlan:
    """The seeds a comparison needs for its goal, at the sd and at both ends of the sd's
    interval (a measured sd is uncertain: an sd from 2 df spans a factor of about 12).

    `seeds`, `fewest`, `most`: seeds per arm (pairs when paired) at `sd`, `sd_low` and
    `sd_high`; None: more than `MAX_SEEDS` (or, for equivalence, never: |true_delta| >= margin).
    `df` None: the sd was stated, not measured (no interval)."""

    goal: Goal
    size: float
    """The difference to detect, or the equivalence margin."""
    sd: float
    df: float | None
    sd_low: float
    sd_high: float
    level: float
    seeds: int | None
    fewest: int | None
    most: int | None
    design: Design
    comparisons: int
    alpha: float
    power: float
    true_delta: float = 0.0

    def sentence(self) -> str:
        """'12 paired seeds (6 to 41 over the sd's 95% interval, 4 df) detect a difference of
        0.01 with 80% power at alpha 0.05/3, seed noise sd 0.005'."""
        unit = "pairs of seeds" if self.design == "paired" else "seeds per arm"
        count = _count(self.seeds)
        if self.df is not None and math.isfinite(self.sd_low):
            count += (
                f" ({_count(self.fewest)} to {_count(self.most)} over the sd's "
                f"{100 * self.level:.3g}% interval, {self.df:g} df)"
            )
        alpha = f"{self.alpha:g}" if self.comparisons == 1 else f"{self.alpha:g}/{self.comparisons}"
        if self.goal == "difference":
            aim = f"detect a difference of {self.size:.3g}"
        else:
            aim = f"settle equivalence within ±{self.size:.3g}" + (
                f" (true difference {self.true_delta:.3g})" if self.true_delta else ""
            )
        noise = "sd of the per-seed differences" if self.design == "paired" else "seed-to-seed sd"
        return (
            f"{count} {unit} {aim} with {100 * self.power:.3g}% power at alpha {alpha} "
            f"({noise} {self.sd:.3g})"
        )


def _count(n: int | None) -> str:
    return f"more than {MAX_SEEDS:,}" if n is None else str(n)


def plan_seeds(
    goal: Goal,
    size: float,
    sd: float,
    *,
    df: float | None = None,
    level: float = 0.95,
    true_delta: float = 0.0,
    design: Design = "paired",
    comparisons: int = 1,
    alpha: float = ALPHA,
    power: float = POWER,
) -> SeedsPlan:
    """The planning statement for a stated effect (`difference`) or margin (`equivalence`),
    from a stated sd (`df` None) or a measured one (`df` its degrees of freedom: the seeds are
    also given at both ends of the sd's chi-square interval at `level`)."""

    def seeds(s: float) -> int | None:
        if goal == "difference":
            return seeds_for_difference(
                size, s, design=design, comparisons=comparisons, alpha=alpha, power=power
            )
        return seeds_for_equivalence(
            size,
            s,
            true_delta=true_delta,
            design=design,
            comparisons=comparisons,
            alpha=alpha,
            power=power,
        )

    low, high = sd_interval(sd, df, level) if df is not None else (math.nan, math.nan)
    measured = df is not None and math.isfinite(low)
    return SeedsPlan(
        goal=goal,
        size=abs(size),
        sd=sd,
        df=df,
        sd_low=low,
        sd_high=high,
        level=level,
        seeds=seeds(sd),
        fewest=seeds(low) if measured else None,
        most=seeds(high) if measured else None,
        design=design,
        comparisons=comparisons,
        alpha=alpha,
        power=power,
        true_delta=true_delta,
    )
