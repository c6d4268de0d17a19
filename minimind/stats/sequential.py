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
the power it reaches (docs/statistics.md, "Sequential seeds"). Each look's boundary is on the
paired t statistic at that look's degrees of freedom (`t_levels`): under no difference the t
statistics' joint law across looks is free of the sd, so the boundaries are calibrated once on
2^20 simulated axes to spend the spending function's error look by look (Jennison & Turnbull
2000, §3.8 and ch. 19 on the unknown variance). A z boundary's nominal level applied to the t
test, the textbook shortcut, spends 5.3 % of a 5 % design at looks 3, 6, 9, 12
(tests/stats/test_sequential.py has the simulations).

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
from scipy import stats

from minimind.stats.intervals import seed_list

Spending = Literal["pocock", "obrien_fleming"]
Stop = Literal["difference", "equivalent", "cap", "open"]
"""Why a comparison stopped: a difference, equivalence within the margin, the cap (undecided);
`open`: not decided and the next look's seeds are not all trained yet."""

CALIBRATION_AXES = 1 << 20
"""Simulated null axes the t boundaries are calibrated on: each look's spent error exact to
about ±2e-4 at α = 0.05 (a binomial sd over 2^20 axes), the same on every machine (one seed)."""
_CALIBRATION_SEED = 20_231_128
_CALIBRATION_CHUNK = 1 << 16  # axes generated at a time: memory stays near 100 MB at 12 seeds


def spent_alpha(fraction: float, alpha: float, spending: Spending) -> float:
    """The two-sided error spent by information fraction `fraction` in (0, 1] (Lan & DeMets)."""
    if spending == "obrien_fleming":
        return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(fraction)))
    return float(alpha * math.log(1 + (math.e - 1) * fraction))


@functools.lru_cache(maxsize=8)
def _null_t(looks: tuple[int, ...]) -> np.ndarray:
    """[looks, CALIBRATION_AXES]: |paired t| at each look of simulated axes with no difference.
    Under no difference the t statistics' joint law across looks is free of the sd, so axes of
    N(0, 1) seeds stand for every study."""
    rng = np.random.default_rng(_CALIBRATION_SEED)
    index = np.array(looks) - 1
    n = np.array(looks, dtype=float)
    chunks = []
    for _ in range(CALIBRATION_AXES // _CALIBRATION_CHUNK):
        x = rng.standard_normal((_CALIBRATION_CHUNK, looks[-1]))
        mean = np.cumsum(x, axis=1)[:, index] / n
        squares = np.cumsum(x * x, axis=1)[:, index]
        chunks.append(np.abs(mean) / np.sqrt((squares - n * mean**2) / (n - 1) / n))
    return np.concatenate(chunks).T


@functools.lru_cache(maxsize=256)
def t_levels(looks: tuple[int, ...], alpha: float, spending: Spending) -> tuple[float, ...]:
    """The nominal two-sided level of each look's paired t test (on that look's n − 1 degrees of
    freedom) such that, under no difference, the chance of first crossing at look k is the
    error `spending` spends between looks k − 1 and k.

    The first look's level is its spent error exactly (nothing came before it). A later look's
    boundary on |t| is the order statistic of the calibration axes still going on
    (`CALIBRATION_AXES`, `_null_t`) that makes its crossings the look's increment; an increment
    under one calibration axis (O'Brien–Fleming at a tiny level) takes the increment itself as
    the level, which can only spend less. Boundaries computed for z and applied to t (the
    earlier design) spent 5.3 % for a 5 % design at looks 3, 6, 9, 12: the t statistics of
    few degrees of freedom are less correlated across looks than the z statistics are."""
    going_on = np.ones(CALIBRATION_AXES, dtype=bool)
    null_t = _null_t(looks)
    spent_before, levels = 0.0, []
    for k, n in enumerate(looks):
        spent = spent_alpha(n / looks[-1], alpha, spending)
        increment, spent_before = spent - spent_before, spent
        crossings = round(increment * CALIBRATION_AXES)
        if k == 0 or crossings < 1:
            level = max(increment, 0.0)
            bound = float(stats.t.isf(level / 2, n - 1)) if level > 0 else math.inf
        else:
            ranked = -np.partition(-null_t[k][going_on], (crossings - 1, crossings))
            bound = float(ranked[crossings - 1] + ranked[crossings]) / 2
            level = float(2 * stats.t.sf(bound, n - 1))
        going_on &= null_t[k] < bound
        levels.append(level)
    return tuple(levels)


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
        return np.array(
            [t_levels(self.looks, self.alpha / r, self.spending) for r in range(1, comparisons + 1)]
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
    delta: float = math.nan
    """The mean difference over the seeds it used (NaN when not given)."""

    def sentence(self) -> str:
        """'stopped at look 2 (6 seeds: 0-5): a difference, interval [+0.01, +0.03]'."""
        if self.stop == "open":
            done = f"open after {len(self.pairs)} paired seed(s) ({describe_pairs(self.pairs)})"
            if len(self.pairs) >= self.seeds:  # its family is looked at together (Holm)
                return f"{done}: look {self.look} waits for the rest of its family's seeds"
            return f"{done}: train both arms to {self.seeds} seeds for look {self.look}"
        interval = f"[{self.low:+.4g}, {self.high:+.4g}]"
        return (
            f"stopped at look {self.look} ({self.seeds} seeds: {describe_pairs(self.pairs)}): "
            f"{self.reason()}, interval {interval}"
        )

    def reason(self) -> str:
        """Why a stopped comparison stopped: 'a difference', 'equivalent within ±0.02' or
        'undecided at the cap'."""
        return {
            "difference": "a difference",
            "equivalent": f"equivalent within ±{self.margin:g}",
            "cap": "undecided at the cap",
        }[self.stop]


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
