"""The statistics of `minimind compare`: the difference of each variant from the baseline with
its interval and p-value, corrected for multiple comparisons; the seed-to-seed noise; power.

docs/statistics.md explains each method and gives its references. The t quantiles and tests are
`scipy.stats`'s (Welch's interval takes the fractional degrees of freedom Welch–Satterthwaite
gives), the corrections `statsmodels.stats.multitest.multipletests`, the power calculations
`statsmodels.stats.power`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestIndPower, TTestPower

CIMethod = Literal["auto", "welch", "bootstrap"]
Correction = Literal["holm", "bonferroni", "none"]
Pairing = Literal["auto", "on", "off"]

ALPHA = 0.05
"""The family-wise error rate of a comparison: 5%, so intervals are 95% before correction."""
POWER = 0.8
BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True)
class DeltaCI:
    """Difference `mean(variant) - mean(baseline)` with its interval at `level` and p-values.

    `method`: `welch`, `paired` (a t interval of per-seed differences), `bootstrap`,
    `baseline`, or `none` (fewer than two seeds, or pairs, on a side). `p` is the raw two-sided
    p-value of the t-test, `p_adj` the one corrected for the comparisons of the family; `level`
    is the interval's confidence after correction. `note` says why a design was not paired.
    `mde` is set by `compare_family`.
    """

    delta: float
    low: float
    high: float
    method: str
    p: float = math.nan
    p_adj: float = math.nan
    level: float = 1.0 - ALPHA
    note: str = ""
    mde: float = math.nan
    """The smallest difference this design detects with 80% power at the corrected alpha."""

    @property
    def within_noise(self) -> bool:
        """True when the difference is not significant at the family's `ALPHA`: the corrected
        p-value of a t-test is >= ALPHA (for Welch, paired and Bonferroni this is the interval
        containing zero); a bootstrap interval contains zero; no interval can be computed.
        Never for the baseline."""
        if self.method == "baseline":
            return False
        if self.method == "none":
            return True
        if self.method != "bootstrap" and not math.isnan(self.p_adj):
            return bool(self.p_adj >= ALPHA)
        return self.low <= 0.0 <= self.high


def welch_ci(x: np.ndarray, y: np.ndarray, level: float = 0.95) -> DeltaCI:
    """Welch's t interval and p-value for mean(x) - mean(y); both need at least two values."""
    delta = float(np.mean(x) - np.mean(y))
    if float(np.var(x, ddof=1)) + float(np.var(y, ddof=1)) == 0.0:
        return DeltaCI(delta, delta, delta, "welch", 0.0 if delta else 1.0, level=level)
    test = stats.ttest_ind(x, y, equal_var=False)
    interval = test.confidence_interval(level)
    return DeltaCI(
        delta, float(interval.low), float(interval.high), "welch", float(test.pvalue), level=level
    )


def paired_ci(x: np.ndarray, y: np.ndarray, level: float = 0.95) -> DeltaCI:
    """The paired t interval and p-value: mean and t interval of the differences x[i] - y[i]
    (seed i of the variant minus seed i of the baseline); needs at least two pairs."""
    d = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    delta = float(d.mean())
    if float(np.var(d, ddof=1)) == 0.0:
        return DeltaCI(delta, delta, delta, "paired", 0.0 if delta else 1.0, level=level)
    test = stats.ttest_rel(x, y)
    interval = test.confidence_interval(level)
    return DeltaCI(
        delta, float(interval.low), float(interval.high), "paired", float(test.pvalue), level=level
    )


def bootstrap_ci(
    x: np.ndarray,
    y: np.ndarray,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> DeltaCI:
    """Percentile bootstrap interval for mean(x) - mean(y), resampling each group on its own.

    Seeded so that the same runs always give the same table. Its p-value is Welch's, so that
    a bootstrap comparison still takes part in the correction.
    """
    rng = np.random.default_rng(seed)
    mx = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    my = y[rng.integers(0, len(y), size=(resamples, len(y)))].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(mx - my, [alpha, 1.0 - alpha])
    p = welch_ci(x, y, level).p
    return DeltaCI(
        float(np.mean(x) - np.mean(y)), float(low), float(high), "bootstrap", p, level=level
    )


@dataclass(frozen=True)
class Sample:
    """The final objective of a group's runs and their seeds (NaN when a run has no seed)."""

    values: np.ndarray
    seeds: np.ndarray

    @classmethod
    def of(cls, values: object, seeds: object = None) -> Sample:
        v = np.asarray(values, dtype=float)
        s = np.full(len(v), np.nan) if seeds is None else np.asarray(seeds, dtype=float)
        keep = ~np.isnan(v)
        return cls(v[keep], s[keep])

    def by_seed(self) -> dict[int, float]:
        """The mean value per seed (reruns of one seed averaged); runs without a seed left out."""
        out: dict[int, list[float]] = {}
        for value, seed in zip(self.values, self.seeds, strict=True):
            if not math.isnan(seed):
                out.setdefault(int(seed), []).append(float(value))
        return {seed: float(np.mean(v)) for seed, v in sorted(out.items())}


def _pairs(
    variant: Sample, baseline: Sample, pairing: Pairing
) -> tuple[np.ndarray, np.ndarray] | str:
    """The per-seed values of both sides, aligned by seed, or why the design is not paired.

    `auto` pairs when both sides ran exactly the same seeds (reruns of a seed are averaged
    first); `on` pairs the seeds both sides share and drops the others.
    """
    if pairing == "off":
        return "unpaired: --paired off"
    v, b = variant.by_seed(), baseline.by_seed()
    if pairing == "auto" and set(v) != set(b):
        return "unpaired: the seeds differ"
    shared = sorted(set(v) & set(b))
    if len(shared) < 2:
        return "unpaired: fewer than 2 seeds on both sides"
    return np.array([v[s] for s in shared]), np.array([b[s] for s in shared])


def delta_ci(
    variant: object,
    baseline: object,
    method: CIMethod = "auto",
    level: float = 0.95,
    *,
    variant_seeds: object = None,
    baseline_seeds: object = None,
    pairing: Pairing = "off",
) -> DeltaCI:
    """The interval for mean(variant) - mean(baseline) by `method`, at `level`.

    `auto` is Welch's t, or the paired t when `pairing` pairs the seeds (see `_pairs`). The
    percentile bootstrap is not used by default: with the 2 to 5 seeds of an ablation it is
    far too narrow (with 2 seeds a side it excludes zero whenever the seeds do not overlap, a
    third of the time under no difference at all; see tests/test_compare_stats.py), while
    Welch's t keeps its 5% even there. With a single seed on either side no spread is known,
    so no interval is given.
    """
    x = Sample.of(variant, variant_seeds)
    y = Sample.of(baseline, baseline_seeds)
    if len(x.values) == 0 or len(y.values) == 0:
        return DeltaCI(math.nan, math.nan, math.nan, "none")
    # The bootstrap resamples each side on its own: it never pairs, and says nothing of it.
    pairs = _pairs(x, y, "off" if method == "bootstrap" else pairing)
    if isinstance(pairs, tuple):
        return paired_ci(*pairs, level)
    note = "" if pairing == "off" or method == "bootstrap" else pairs
    if min(len(x.values), len(y.values)) < 2:
        delta = float(np.mean(x.values) - np.mean(y.values))
        return DeltaCI(delta, math.nan, math.nan, "none", note=note)
    if method == "bootstrap":
        return bootstrap_ci(x.values, y.values, level)
    return replace(welch_ci(x.values, y.values, level), note=note)


def corrected_level(n_comparisons: int, correction: Correction, alpha: float = ALPHA) -> float:
    """The confidence of each interval in a family of `n_comparisons`: 1 - alpha uncorrected,
    else Bonferroni's 1 - alpha / n (also shown with Holm, whose step-down has no interval of
    its own: these simultaneous intervals are its conservative companion)."""
    if correction == "none" or n_comparisons <= 1:
        return 1.0 - alpha
    return 1.0 - alpha / n_comparisons


def family_alpha(n_comparisons: int, correction: Correction, alpha: float = ALPHA) -> float:
    """The alpha of each test in a family: alpha uncorrected, else alpha / n (Bonferroni's,
    and the first step of Holm's)."""
    return 1.0 - corrected_level(n_comparisons, correction, alpha)


def compare_family(
    variants: Mapping[str, Sample],
    baseline: Sample | Mapping[str, Sample],
    *,
    method: CIMethod = "auto",
    correction: Correction = "holm",
    pairing: Pairing = "auto",
    noise_sd: float = math.nan,
) -> dict[str, DeltaCI]:
    """Each variant against the baseline (or, given a mapping, against its own reference): raw
    p, p corrected over the family of comparisons that have one (`multipletests`), the
    interval at the corrected level, and the smallest difference the design detects (`mde`:
    for a paired design from the sd of its per-seed differences, else from `noise_sd`, the
    seed-to-seed sd)."""
    reference = {
        name: baseline if isinstance(baseline, Sample) else baseline[name] for name in variants
    }
    raw = {
        name: delta_ci(
            s.values,
            reference[name].values,
            method,
            1.0 - ALPHA,
            variant_seeds=s.seeds,
            baseline_seeds=reference[name].seeds,
            pairing=pairing,
        )  # fmt: skip
        for name, s in variants.items()
    }
    tested = [name for name, ci in raw.items() if not math.isnan(ci.p)]
    level = corrected_level(len(tested), correction)
    if correction == "none" or not tested:
        adjusted = [raw[name].p for name in tested]
    else:
        adjusted = multipletests([raw[name].p for name in tested], ALPHA, method=correction)[1]
    out = dict(raw)
    for name, p_adj in zip(tested, adjusted, strict=True):
        s, ref = variants[name], reference[name]
        ci = delta_ci(
            s.values, ref.values, method, level,
            variant_seeds=s.seeds, baseline_seeds=ref.seeds, pairing=pairing,
        )  # fmt: skip
        if ci.method == "paired":
            d = paired_differences(s, ref, pairing)
            mde = detectable_difference(
                len(d), len(d), float(np.std(d, ddof=1)), 1 - level, paired=True
            )
        else:
            mde = detectable_difference(len(s.values), len(ref.values), noise_sd, 1 - level)
        out[name] = replace(ci, p=raw[name].p, p_adj=float(p_adj), mde=mde)
    return out


def paired_differences(variant: Sample, baseline: Sample, pairing: Pairing = "auto") -> np.ndarray:
    """The per-seed differences variant - baseline when the design pairs, else empty."""
    pairs = _pairs(variant, baseline, pairing)
    return pairs[0] - pairs[1] if isinstance(pairs, tuple) else np.array([])


def seed_values(sample: Sample) -> np.ndarray:
    """One value per seed (reruns of a seed averaged: they measure the run-to-run
    nondeterminism, not the seed-to-seed noise); runs without a seed count as their own."""
    by_seed = sample.by_seed()
    unseeded = sample.values[np.isnan(sample.seeds)]
    return np.concatenate([np.array(list(by_seed.values()), dtype=float), unseeded])


# The noise floor and power ---------------------------------------------------------------


@dataclass(frozen=True)
class Noise:
    """The seed-to-seed standard deviation of the objective, pooled over groups, with its
    chi-square interval at `level` and its degrees of freedom (runs less groups)."""

    sd: float
    low: float
    high: float
    df: int
    level: float = 1.0 - ALPHA


def pooled_noise(groups: list[np.ndarray], level: float = 1.0 - ALPHA) -> Noise:
    """The pooled within-group standard deviation: sqrt(sum of squared deviations from each
    group's mean / sum(n_i - 1)), groups of one run adding nothing; interval from
    df·s²/σ² ~ chi²(df)."""
    values = [np.asarray(g, dtype=float)[~np.isnan(np.asarray(g, dtype=float))] for g in groups]
    df = sum(len(v) - 1 for v in values if len(v) > 1)
    if df == 0:
        return Noise(math.nan, math.nan, math.nan, 0, level)
    ss = sum(float(np.sum((v - v.mean()) ** 2)) for v in values if len(v) > 1)
    s2 = ss / df
    tail = (1.0 - level) / 2.0
    low = math.sqrt(df * s2 / stats.chi2.ppf(1.0 - tail, df))
    high = math.sqrt(df * s2 / stats.chi2.ppf(tail, df))
    return Noise(math.sqrt(s2), low, high, df, level)


def signal_to_noise(group_means: np.ndarray, seed_sd: float) -> float:
    """Heineman et al. (2025, "Signal and Noise")'s ratio for the compared groups: the signal is
    the spread of the groups' means (max - min), the noise the seed-to-seed sd. Their relative
    forms both divide by the mean score, which cancels. NaN with fewer than two groups or no
    noise measured. Larger: the metric tells these groups apart more reliably."""
    means = np.asarray(group_means, dtype=float)
    means = means[np.isfinite(means)]
    if len(means) < 2 or not seed_sd > 0:
        return math.nan
    return float((means.max() - means.min()) / seed_sd)


def seeds_for_power(
    delta: float, sd: float, alpha: float = ALPHA, power: float = POWER, paired: bool = False
) -> int:
    """Seeds per arm for a two-sided t-test at `alpha` to detect `delta` with `power`, when
    seeds vary by `sd` (for a paired design: the sd of the per-seed differences). At least 2."""
    if not (sd > 0 and delta != 0):
        raise ValueError(f"need a positive sd and a nonzero delta, got sd {sd}, delta {delta}")
    effect = abs(delta) / sd
    solver = TTestPower() if paired else TTestIndPower()
    solved = float(np.asarray(solver.solve_power(effect, None, alpha, power)).item())
    # The root finder gives up below 2 seeds (a huge effect): 2 is then the answer.
    n = max(2, math.ceil(solved)) if math.isfinite(solved) else 2
    while n > 2 and solver.power(effect, n - 1, alpha) >= power:  # the ceiling's rounding
        n -= 1
    while solver.power(effect, n, alpha) < power:
        n += 1
    return n


def detectable_difference(
    n_variant: int, n_baseline: int, sd: float, alpha: float = ALPHA, power: float = POWER,
    paired: bool = False,
) -> float:  # fmt: skip
    """The smallest difference a design detects with `power` at `alpha`: the effect size
    `statsmodels` solves for, times `sd` (a paired design: `n_variant` pairs, sd of differences)."""
    if not sd > 0 or min(n_variant, n_baseline) < 2:
        return math.nan
    if paired:
        effect = TTestPower().solve_power(nobs=n_variant, alpha=alpha, power=power)
    else:
        effect = TTestIndPower().solve_power(
            nobs1=n_variant, ratio=n_baseline / n_variant, alpha=alpha, power=power
        )
    return float(np.asarray(effect).item()) * sd
