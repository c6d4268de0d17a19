"""The statistics of `minimind compare`: the difference of each variant from the baseline with
its interval and p-value, corrected for multiple comparisons; the seed-to-seed noise; power.

docs/statistics.md explains each method and gives its references. The t quantiles and tests are
`scipy.stats`'s (Welch's interval takes the fractional degrees of freedom Welch–Satterthwaite
gives), the corrections `statsmodels.stats.multitest.multipletests`, the power calculations
`minimind.stats.power`'s.

A seed's reruns are one observation everywhere (their mean: reruns measure the run-to-run
nondeterminism, not the seed-to-seed noise), in the Welch and bootstrap paths as in the paired
one. Every interval is at the level its row's decision uses (`step_down_levels`), so that an
interval excludes zero exactly when its corrected test rejects.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests

from minimind.foundations.corrections import Correction
from minimind.stats.power import ALPHA, detectable_difference, sd_interval

CIMethod = Literal["auto", "welch", "bootstrap"]
Pairing = Literal["auto", "on", "off"]

BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True)
class DeltaCI:
    """Difference `mean(variant) - mean(baseline)` with its interval at `level` and p-values.

    `method`: `welch`, `paired` (a t interval of per-seed differences), `bootstrap`,
    `baseline`, or `none` (fewer than two seeds, or pairs, on a side). `p` is the raw two-sided
    p-value of the t-test, `p_adj` the one corrected for the comparisons of the family; `level`
    is the interval's confidence after correction. `note` says why a design was not paired, or
    which seeds a paired one left out.
    `pairs`: the seeds paired (0 unless paired). `mde` is set by `compare_family`.
    """

    delta: float
    low: float
    high: float
    method: str
    p: float = math.nan
    p_adj: float = math.nan
    level: float = 1.0 - ALPHA
    note: str = ""
    pairs: int = 0
    mde: float = math.nan
    """The smallest difference this design detects with 80% power at the corrected alpha."""
    simultaneous_low: float = math.nan
    simultaneous_high: float = math.nan
    """The interval at the family's Bonferroni level (`corrected_level`), which holds for all
    its rows at once whatever Holm's step order: equivalence is decided by it. Set by
    `compare_family`; NaN for a row that was not tested."""

    @property
    def within_noise(self) -> bool | None:
        """Whether the difference is not significant at the family's `ALPHA`: the corrected
        p-value (the raw one outside a family) is >= ALPHA: the row's interval, at its step's
        level, then contains zero. None for a row that was not tested: the baseline, no
        interval, no p-value (a non-finite value)."""
        p = self.p if math.isnan(self.p_adj) else self.p_adj
        if self.method in ("baseline", "none") or math.isnan(p):
            return None
        return bool(p >= ALPHA)


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
        p = 0.0 if delta else 1.0
        return DeltaCI(delta, delta, delta, "paired", p, level=level, pairs=len(d))
    test = stats.ttest_rel(x, y)
    interval = test.confidence_interval(level)
    return DeltaCI(
        delta,
        float(interval.low),
        float(interval.high),
        "paired",
        float(test.pvalue),
        level=level,
        pairs=len(d),
    )


def bootstrap_ci(
    x: np.ndarray,
    y: np.ndarray,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> DeltaCI:
    """Percentile bootstrap interval for mean(x) - mean(y), resampling each group on its own,
    widened to contain Welch's interval at the same level.

    Seeded so that the same runs always give the same table. Its p-value is Welch's, so that
    a bootstrap comparison takes part in the correction, and the verdict is Welch's corrected
    test. With the few seeds of an ablation the percentile interval is far too narrow (it
    excludes zero for most of a family under no difference at all); holding Welch's interval
    inside it keeps the interval and its verdict in agreement: the union excludes zero
    exactly when Welch's interval does.
    """
    rng = np.random.default_rng(seed)
    mx = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    my = y[rng.integers(0, len(y), size=(resamples, len(y)))].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(mx - my, [alpha, 1.0 - alpha])
    welch = welch_ci(x, y, level)
    return DeltaCI(
        welch.delta,
        min(float(low), welch.low),
        max(float(high), welch.high),
        "bootstrap",
        welch.p,
        level=level,
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


def seed_list(seeds: Iterable[int]) -> str:
    """'0-5' for a run of three or more consecutive seeds, else '0, 2, 3'."""
    ordered = sorted(int(s) for s in seeds)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(map(str, ordered))


def _pairs(
    variant: Sample, baseline: Sample, pairing: Pairing
) -> tuple[np.ndarray, np.ndarray, str] | str:
    """The per-seed values of both sides, aligned by seed, and a note naming the seeds left
    out ('' when none was); or why the design is not paired.

    `auto` pairs the common seeds when one side ran every seed of the other (reruns of a seed
    are averaged first): a seed added to one variant leaves it out of the pairs, rather than
    the pairing out of the test; when each side ran seeds the other did not, it does not pair.
    `on` pairs the seeds both sides share, whatever the others.
    """
    if pairing == "off":
        return "unpaired: --paired off"
    v, b = variant.by_seed(), baseline.by_seed()
    nested = set(v) <= set(b) or set(b) <= set(v)
    if pairing == "auto" and not nested:
        return "unpaired: the seeds differ"
    shared = sorted(set(v) & set(b))
    if len(shared) < 2:
        return "unpaired: fewer than 2 seeds on both sides"
    left = [
        f"{side}'s seed{'s' if len(extra) > 1 else ''} {seed_list(extra)}"
        for side, extra in (("the variant", set(v) - set(b)), ("the baseline", set(b) - set(v)))
        if extra
    ]
    note = f"paired on seeds {seed_list(shared)}, left out: {' and '.join(left)}" if left else ""
    return np.array([v[s] for s in shared]), np.array([b[s] for s in shared]), note


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
    """The interval for mean(variant) - mean(baseline) by `method`, at `level`, over one value
    per seed (`seed_values`: reruns of a seed averaged) on each side.

    `auto` is Welch's t, or the paired t when `pairing` pairs the seeds (see `_pairs`). The
    percentile bootstrap is not used by default: with the 2 to 5 seeds of an ablation it is
    far too narrow (with 2 seeds a side it excludes zero whenever the seeds do not overlap, a
    third of the time under no difference at all; see tests/stats/test_intervals.py), while
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
        return replace(paired_ci(pairs[0], pairs[1], level), note=pairs[2])
    note = "" if pairing == "off" or method == "bootstrap" else pairs
    xs, ys = seed_values(x), seed_values(y)
    if min(len(xs), len(ys)) < 2:
        delta = float(np.mean(xs) - np.mean(ys))
        return DeltaCI(delta, math.nan, math.nan, "none", note=note)
    if method == "bootstrap":
        return bootstrap_ci(xs, ys, level)
    return replace(welch_ci(xs, ys, level), note=note)


def corrected_level(n_comparisons: int, correction: Correction, alpha: float = ALPHA) -> float:
    """The family's Bonferroni level: 1 - alpha uncorrected, else 1 - alpha / n (Holm's first
    step). The level of each row's interval is `step_down_levels`'."""
    if correction == "none" or n_comparisons <= 1:
        return 1.0 - alpha
    return 1.0 - alpha / n_comparisons


def step_down_levels(
    p_values: list[float], correction: Correction, alpha: float = ALPHA
) -> list[float]:
    """The level of each test's interval, chosen so that the interval excludes zero exactly
    when the corrected test rejects (the p-value and the interval invert the same t-test).

    Uncorrected 1 - alpha, Bonferroni 1 - alpha / k. Holm's step-down tests the i-th smallest
    p-value (i from 0) at alpha / (k - i) while every earlier one was rejected: a rejected test
    gets the interval at its step's level 1 - alpha / (k - i); from the first test not
    rejected (step j) on, every test gets the level of step j, at which its interval contains
    zero, since its p-value is at least that step's. Only the Bonferroni level holds all the
    intervals simultaneously (docs/statistics.md, "Intervals and verdicts").
    """
    k = len(p_values)
    if correction == "none" or k <= 1:
        return [1.0 - alpha] * k
    if correction == "bonferroni":
        return [1.0 - alpha / k] * k
    levels = [math.nan] * k
    stopped: float | None = None
    for step, i in enumerate(np.argsort(p_values, kind="stable")):
        step_alpha = alpha / (k - step)
        if stopped is None and not p_values[i] < step_alpha:
            stopped = step_alpha
        levels[i] = 1.0 - (step_alpha if stopped is None else stopped)
    return levels


def family_alpha(n_comparisons: int, correction: Correction, alpha: float = ALPHA) -> float:
    """The alpha of each test in a family: alpha uncorrected, else alpha / n (Bonferroni's,
    and the first step of Holm's)."""
    return 1.0 - corrected_level(n_comparisons, correction, alpha)


def tested_count(family: Mapping[str, DeltaCI]) -> int:
    """The family's size k: its rows with a p-value (tested), the one count that the
    correction, the intervals' level, the power lines and the study's plans all use."""
    return sum(not math.isnan(ci.p) for ci in family.values())


def power_comparisons(n_comparisons: int, correction: Correction) -> int:
    """The k the power calculations divide alpha by: the family's size, 1 uncorrected."""
    return 1 if correction == "none" else max(1, n_comparisons)


def compare_family(
    variants: Mapping[str, Sample],
    baseline: Sample | Mapping[str, Sample],
    *,
    method: CIMethod = "auto",
    correction: Correction = "holm",
    pairing: Pairing = "auto",
    noise_sd: float = math.nan,
    detectable: bool = True,
) -> dict[str, DeltaCI]:
    """Each variant against the baseline (or, given a mapping, against its own reference): raw
    p, p corrected over the family of comparisons that have one (`multipletests`), the
    interval at the level of its step (`step_down_levels`), and the smallest difference the
    design detects with 80% power at the family's Bonferroni alpha (`mde`: paired, from the sd
    of its per-seed differences; Welch, from each side's sd with Welch–Satterthwaite df, or
    `noise_sd`, the pooled seed-to-seed sd, where a side has no spread). Simulations of the
    error rates, which read only the verdicts, pass `detectable=False` to skip the MDE."""
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
    raw_p = [raw[name].p for name in tested]
    levels = step_down_levels(raw_p, correction)
    if correction == "none" or not tested:
        adjusted = raw_p
    else:
        adjusted = list(multipletests(raw_p, ALPHA, method=correction)[1])
    k = power_comparisons(tested_count(raw), correction)
    simultaneous_level = corrected_level(tested_count(raw), correction)
    out = dict(raw)
    for name, p_adj, level in zip(tested, adjusted, levels, strict=True):
        s, ref = variants[name], reference[name]

        def interval(at: float, s: Sample = s, ref: Sample = ref) -> DeltaCI:
            return delta_ci(
                s.values, ref.values, method, at,
                variant_seeds=s.seeds, baseline_seeds=ref.seeds, pairing=pairing,
            )  # fmt: skip

        ci = interval(level)
        simultaneous = ci if level == simultaneous_level else interval(simultaneous_level)
        mde = _mde(ci, s, ref, pairing, noise_sd, k) if detectable else math.nan
        out[name] = replace(
            ci,
            p=raw[name].p,
            p_adj=float(p_adj),
            mde=mde,
            simultaneous_low=simultaneous.low,
            simultaneous_high=simultaneous.high,
        )
    return out


def _mde(ci: DeltaCI, variant: Sample, baseline: Sample, pairing: Pairing, noise_sd: float,
         comparisons: int) -> float:  # fmt: skip
    """The MDE of one tested row's design (see `compare_family`)."""
    if ci.method == "paired":
        d = paired_differences(variant, baseline, pairing)
        return detectable_difference(
            len(d), float(np.std(d, ddof=1)), design="paired", comparisons=comparisons
        )
    xs, ys = seed_values(variant), seed_values(baseline)
    sx, sy = float(np.std(xs, ddof=1)), float(np.std(ys, ddof=1))
    if sx > 0 and sy > 0:
        return detectable_difference(
            len(xs), sx, design="welch", n_baseline=len(ys), sd_baseline=sy,
            comparisons=comparisons,
        )  # fmt: skip
    return detectable_difference(
        len(xs), noise_sd, design="unpaired", n_baseline=len(ys), comparisons=comparisons
    )


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
    sd = math.sqrt(ss / df)
    low, high = sd_interval(sd, df, level)
    return Noise(sd, low, high, df, level)


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
