"""Sequential seeds: a study's comparisons decided in looks, each stopping once its answer is known.

Seeds are added in looks (`SequentialDesign.looks`, e.g. 3, 6, 9, 12 seeds per arm), and only to
the comparisons not yet decided. At each look a comparison stops

- for a **difference**, when its paired t statistic crosses the group-sequential boundary;
- for **equivalence**, when its repeated confidence interval lies within ±margin;
- at the **cap** (the last look), undecided.

The error rate holds across looks by alpha spending (Lan & DeMets 1983): the two-sided level
spent by information fraction t = n / n_cap is O'Brien–Fleming-type (the default),
2 − 2Φ(z_{1−α/2} / √t), or Pocock-type, α·ln(1 + (e − 1)·t). O'Brien–Fleming-type spends almost
nothing at 3 seeds, where a t test on 2 degrees of freedom could not use it anyway, and keeps
the power of the fixed design at the cap; simulated, it needs fewer seeds than Pocock-type for
the power it reaches (docs/statistics.md, "Sequential seeds"). The boundaries are found on the z scale by numerical integration over the
looks (Armitage, McPherson & Rowe 1969; Jennison & Turnbull 2000, ch. 19), and a look's nominal
two-sided level is applied to the paired t test of that look's seeds (Jennison & Turnbull 2000,
§3.8: the unknown variance), which keeps the error at the planned level for looks at 3, 6, 9
and 12 seeds (the simulations in tests/stats/test_sequential.py; with a look at every seed it drifts
above it, so check other looks with `simulate`).

Holm across an axis: the graphical group-sequential Holm procedure (Maurer & Bretz 2013; Ye et al.
2013). With r hypotheses of the axis not rejected, the open ones are stepped down at each look,
the i-th smallest p value at the boundary of level α/(r − i); a rejection passes its level on to
the others, a comparison stopped for equivalence keeps its own. A non-rejected comparison's
interval is the repeated confidence interval (Jennison & Turnbull 1989) at level α/r, the one
compatible with the step-down (Strassburger & Bretz 2008): its verdict and its interval agree.
Equivalence is decided by the repeated interval at α/k, k the axis's comparisons, as the fixed
design decides it: the level a rejection frees is the difference tests', and spent on
equivalence it let false equivalence reach 2 % against α/k = 1.25 % (four comparisons).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import optimize, stats

from minimind.stats.intervals import seed_list

Spending = Literal["pocock", "obrien_fleming"]
Stop = Literal["difference", "equivalent", "cap", "open"]
"""Why a comparison stopped: a difference, equivalence within the margin, the cap (undecided);
`open`: not decided and the next look's seeds are not all trained yet."""

GRID_POINTS = 801  # integration points per look: boundaries exact to about 1e-7 in alpha


def spent_alpha(fraction: float, alpha: float, spending: Spending) -> float:
    """The two-sided error spent by information fraction `fraction` in (0, 1] (Lan & DeMets)."""
    if spending == "obrien_fleming":
        return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(fraction)))
    return float(alpha * math.log(1 + (math.e - 1) * fraction))


def _crossing(
    density: np.ndarray, grid: np.ndarray, step: float, var: float, bound: float
) -> float:
    """P(previous looks continued and |S_prev + N(0, var)| >= bound), S_prev with `density` on
    `grid` (the continuation region of the previous looks)."""
    sd = math.sqrt(var)
    tail = stats.norm.sf((bound - grid) / sd) + stats.norm.cdf((-bound - grid) / sd)
    return float(np.trapezoid(density * tail, dx=step))


@functools.lru_cache(maxsize=256)
def z_boundaries(
    fractions: tuple[float, ...], alpha: float, spending: Spending
) -> tuple[float, ...]:
    """Two-sided boundaries c_k on the z scale at the information `fractions` (increasing, the
    last 1): under no difference, the chance of first crossing at look k is the error spent
    between looks k − 1 and k. Z_k = S_k / √t_k with S Brownian motion (independent increments
    of variance t_k − t_{k−1})."""
    boundaries: list[float] = []
    grid = density = np.empty(0)
    step, previous_fraction, previous_spent = 0.0, 0.0, 0.0
    for fraction in fractions:
        spent = spent_alpha(fraction, alpha, spending)
        increment, var = spent - previous_spent, fraction - previous_fraction
        if not boundaries:
            bound = float(stats.norm.isf(spent / 2)) * math.sqrt(fraction)
        elif increment <= 0:
            bound = math.inf
        else:
            bound = optimize.brentq(
                lambda b, d=density, g=grid, h=step, v=var, a=increment: (
                    _crossing(d, g, h, v, b) - a
                ),
                1e-9,
                50.0 * math.sqrt(fraction),
                xtol=1e-12,
            )
        boundaries.append(bound / math.sqrt(fraction))
        # the density of S_k on its continuation region (-bound, bound)
        edge = min(bound, 12 * math.sqrt(fraction))
        new_grid = np.linspace(-edge, edge, GRID_POINTS)
        new_step = new_grid[1] - new_grid[0]
        if density.size == 0:
            new_density = stats.norm.pdf(new_grid, scale=math.sqrt(fraction))
        else:
            kernel = stats.norm.pdf(new_grid[:, None] - grid[None, :], scale=math.sqrt(var))
            new_density = np.trapezoid(kernel * density[None, :], dx=step, axis=1)
        grid, density, step = new_grid, new_density, new_step
        previous_fraction, previous_spent = fraction, spent
    return tuple(boundaries)


@dataclass(frozen=True)
class SequentialDesign:
    """Looks at `looks` paired seeds per arm (increasing; the last is the cap), a family-wise
    two-sided `alpha` over an axis, spent by `spending`."""

    looks: tuple[int, ...] = (3, 6, 9, 12)
    alpha: float = 0.05
    spending: Spending = "obrien_fleming"

    def __post_init__(self) -> None:
        if not self.looks or self.looks[0] < 2 or list(self.looks) != sorted(set(self.looks)):
            raise ValueError(f"looks must increase from at least 2 seeds, got {self.looks}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")

    @property
    def cap(self) -> int:
        return self.looks[-1]

    def nominal_levels(self, comparisons: int) -> np.ndarray:
        """[comparisons, looks]: row r − 1 the nominal two-sided level of each look for a
        hypothesis holding alpha / r."""
        fractions = tuple(n / self.cap for n in self.looks)
        return np.array(
            [
                2 * stats.norm.sf(np.array(z_boundaries(fractions, self.alpha / r, self.spending)))
                for r in range(1, comparisons + 1)
            ]
        )


@dataclass(frozen=True)
class Decisions:
    """The outcome of every comparison (arrays [runs, comparisons] for `simulate`, [comparisons]
    for one study): why it stopped (`Stop`), the look it stopped at (index into the design's
    looks; for `open`, the look whose seeds it waits for) and the seeds it used."""

    stop: np.ndarray
    look: np.ndarray
    seeds: np.ndarray
    low: np.ndarray
    """The repeated confidence interval of the difference at the look it stopped (for a
    difference: bounded by 0 on the far side, as Holm's compatible intervals are)."""
    high: np.ndarray


@dataclass(frozen=True)
class Standing:
    """Where one comparison stands in the sequential design (`sequential.decide`)."""

    stop: Stop
    look: int
    """The look it stopped at, or (open) the look whose seeds it waits for; 1 is the first."""
    seeds: int
    """Seeds per arm at that look."""
    pairs: list[tuple[int, int]]
    """The seeds it used, (the arm's, the reference's): those of its stopping look, or all so
    far while open."""
    low: float
    high: float
    margin: float

    def sentence(self) -> str:
        """'stopped at look 2 (6 seeds: 0-5): a difference, interval [+0.01, +0.03]'."""
        if self.stop == "open":
            return (
                f"open after {len(self.pairs)} paired seed(s) ({describe_pairs(self.pairs)}): "
                f"train both arms to {self.seeds} seeds for look {self.look}"
            )
        interval = f"[{self.low:+.4g}, {self.high:+.4g}]"
        why = {
            "difference": f"a difference, interval {interval}",
            "equivalent": f"equivalent within ±{self.margin:g}, interval {interval}",
            "cap": f"undecided at the cap, interval {interval}",
        }[self.stop]
        return (
            f"stopped at look {self.look} ({self.seeds} seeds: {describe_pairs(self.pairs)}): {why}"
        )


def describe_pairs(pairs: list[tuple[int, int]]) -> str:
    """'0-5', '0, 2, 3', or for an A/A row's pairs '3-5 against 0-2'; 'none'."""
    if not pairs:
        return "none"
    arm, against = ([p[k] for p in pairs] for k in (0, 1))
    return seed_list(arm) if arm == against else f"{seed_list(arm)} against {seed_list(against)}"


def decide(differences: np.ndarray, design: SequentialDesign, margin: float | None) -> Decisions:
    """Replay the design's looks over paired differences [runs, comparisons, seeds] (the
    comparisons of one axis, one family; NaN where a seed is not trained yet).

    Looks go on while every open comparison has the look's seeds; a comparison stops for a
    difference (Holm step-down at the look's group-sequential levels), for equivalence (its
    repeated interval within ±`margin`; never when `margin` is None) or at the cap. Replaying from
    the start gives the same decisions whatever was trained beyond them, so a study that stopped
    continues where it stopped.
    """
    runs, comparisons, trained_seeds = differences.shape
    if trained_seeds < design.cap:  # seeds not trained yet are NaN
        missing = np.full((runs, comparisons, design.cap - trained_seeds), np.nan)
        differences = np.concatenate([differences, missing], axis=2)
    nominal = design.nominal_levels(comparisons)
    stop = np.full((runs, comparisons), "open", dtype=object)
    look_of = np.zeros((runs, comparisons), dtype=int)
    seeds = np.zeros((runs, comparisons), dtype=int)
    low = np.full((runs, comparisons), np.nan)
    high = np.full((runs, comparisons), np.nan)
    rejected = np.zeros(runs, dtype=int)
    waiting = np.zeros(runs, dtype=bool)  # an open comparison lacks this look's seeds
    for k, n in enumerate(design.looks):
        open_ = (stop == "open") & ~waiting[:, None]
        window = differences[:, :, :n]
        waiting |= (open_ & np.isnan(window).any(axis=2)).any(axis=1)
        active = open_ & ~waiting[:, None]
        look_of[open_] = k
        if not active.any():
            continue
        mean = window.mean(axis=2)
        se = window.std(axis=2, ddof=1) / math.sqrt(n)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(mean) / se
        p = np.where(active, 2 * stats.t.sf(t, n - 1), np.inf)
        p = np.where(np.isnan(p), 1.0, p)
        # Holm step-down among the open: the i-th smallest at level alpha / (unrejected - i)
        order = np.argsort(p, axis=1, kind="stable")
        ranked = np.take_along_axis(p, order, axis=1)
        holding = comparisons - rejected
        level_row = np.clip(holding[:, None] - np.arange(comparisons)[None, :], 1, None) - 1
        passes = ranked <= nominal[level_row, k]
        reject_ranked = np.cumprod(passes, axis=1).astype(bool)
        reject = np.zeros_like(reject_ranked)
        np.put_along_axis(reject, order, reject_ranked, axis=1)
        reject &= active
        rejected += reject.sum(axis=1)
        # intervals: a non-rejected comparison at level alpha / (still unrejected)
        level = nominal[np.clip(comparisons - rejected, 1, None) - 1, k]
        half = stats.t.isf(level / 2, n - 1)[:, None] * se
        lo, hi = mean - half, mean + half
        lo = np.where(reject & (mean > 0), np.maximum(lo, 0.0), lo)
        hi = np.where(reject & (mean < 0), np.minimum(hi, 0.0), hi)
        # equivalence at alpha / comparisons, whatever Holm's rejections freed (the fixed
        # design's rule): the level a rejection passes on belongs to the difference tests
        equal_half = stats.t.isf(nominal[comparisons - 1, k] / 2, n - 1) * se
        equivalent = active & ~reject
        equivalent &= (
            (np.abs(mean) + equal_half <= margin) if margin is not None else np.zeros_like(reject)
        )
        lo = np.where(equivalent, mean - equal_half, lo)
        hi = np.where(equivalent, mean + equal_half, hi)
        last = k == len(design.looks) - 1
        finished = reject | equivalent | (active & last)
        stop[reject] = "difference"
        stop[equivalent] = "equivalent"
        stop[active & last & ~reject & ~equivalent] = "cap"
        seeds[finished], low[finished], high[finished] = n, lo[finished], hi[finished]
    return Decisions(stop, look_of, seeds, low, high)


def simulate(
    effects: np.ndarray, design: SequentialDesign, margin: float | None, runs: int, seed: int = 0
) -> Decisions:
    """The design over `runs` simulated axes whose comparisons' paired differences are
    N(effects[j], 1) per seed (effects in sds of the paired differences)."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((runs, len(effects), design.cap))
    return decide(noise + np.asarray(effects)[None, :, None], design, margin)


def holm_rejections(p: np.ndarray, alpha: float) -> np.ndarray:
    """[runs, comparisons]: Holm's step-down rejections of each row of p values [runs,
    comparisons] (statsmodels' `multipletests(method="holm")`, one row at a time, vectorised for
    the simulations)."""
    comparisons = p.shape[1]
    order = np.argsort(p, axis=1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=1)
    passes = ranked <= alpha / (comparisons - np.arange(comparisons))[None, :]
    reject = np.zeros_like(passes)
    np.put_along_axis(reject, order, np.cumprod(passes, axis=1).astype(bool), axis=1)
    return reject


def fixed_design_rejections(
    effects: np.ndarray, seeds: int, alpha: float, runs: int, seed: int = 0
) -> np.ndarray:
    """[runs, comparisons]: which comparisons a fixed design of `seeds` paired seeds rejects
    with Holm over the axis, over `runs` simulated axes (as `simulate`)."""
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((runs, len(effects), seeds)) + np.asarray(effects)[None, :, None]
    return holm_rejections(stats.ttest_1samp(d, 0.0, axis=2).pvalue, alpha)
