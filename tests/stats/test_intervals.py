"""The confidence-interval logic of `minimind compare`, on synthetic numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from minimind.stats.intervals import (
    Sample,
    bootstrap_ci,
    compare_family,
    delta_ci,
    pooled_noise,
    step_down_levels,
    welch_ci,
)
from minimind.stats.power import detectable_difference


def test_welch_hand_computation() -> None:
    # Equal variances (1) and sizes (3): se² = 2/3 and the Welch–Satterthwaite df is exactly 4.
    ci = welch_ci(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]))
    half = 2.776445 * math.sqrt(2 / 3)
    assert ci.method == "welch" and ci.delta == -3.0
    assert ci.low == pytest.approx(-3.0 - half, abs=1e-5)
    assert ci.high == pytest.approx(-3.0 + half, abs=1e-5)
    assert not ci.within_noise


@pytest.mark.parametrize(("nx", "ny", "level"), [(2, 2, 0.95), (3, 5, 0.95), (4, 3, 0.9)])
def test_welch_matches_scipy_welch_t_test(nx: int, ny: int, level: float) -> None:
    rng = np.random.default_rng(nx * 10 + ny)
    x, y = rng.normal(2.0, 0.1, nx), rng.normal(2.1, 0.3, ny)
    ci = welch_ci(x, y, level)
    expected = stats.ttest_ind(x, y, equal_var=False).confidence_interval(level)
    assert (ci.low, ci.high) == pytest.approx((expected.low, expected.high), rel=1e-12)


def test_welch_unequal_variances() -> None:
    x, y = np.array([2.0, 2.1, 1.9, 2.05]), np.array([1.0, 3.0, 2.0])
    vx, vy = np.var(x, ddof=1) / 4, np.var(y, ddof=1) / 3
    df = (vx + vy) ** 2 / (vx**2 / 3 + vy**2 / 2)
    ci = welch_ci(x, y)
    half = stats.t.ppf(0.975, df) * math.sqrt(vx + vy)
    assert ci.low == pytest.approx(x.mean() - y.mean() - half)
    assert ci.within_noise  # a huge spread in y


def test_welch_covers_the_true_difference_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(1)
    trials, covered = 2000, 0
    for _ in range(trials):
        x = rng.normal(0.3, 1.0, size=5)
        y = rng.normal(0.0, 3.0, size=7)
        ci = welch_ci(x, y)
        covered += ci.low <= 0.3 <= ci.high
    assert abs(covered / trials - 0.95) < 0.015  # 3 binomial standard deviations


def test_bootstrap_is_seeded_and_brackets_the_delta() -> None:
    x, y = np.array([2.0, 2.02, 2.04]), np.array([2.10, 2.20, 2.15])
    a, b = bootstrap_ci(x, y), bootstrap_ci(x, y)
    assert a == b and a.method == "bootstrap"
    assert a.delta == pytest.approx(-0.13) and a.low <= a.delta <= a.high
    # Groups that do not overlap: every resample keeps the sign, so the interval excludes 0.
    assert a.high < 0 and not a.within_noise
    # Never narrower than Welch's interval at the same level.
    welch = welch_ci(x, y)
    assert a.low <= welch.low and a.high >= welch.high and a.p == welch.p


def test_bootstrap_agrees_with_welch_for_large_n() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.normal(1.0, 1.0, 400), rng.normal(0.8, 2.0, 300)
    boot, welch = bootstrap_ci(x, y), welch_ci(x, y)
    width = welch.high - welch.low
    assert abs(boot.low - welch.low) < 0.05 * width and abs(boot.high - welch.high) < 0.05 * width


def test_bootstrap_interval_holds_welchs_and_agrees_with_its_verdict() -> None:
    """Non-overlapping seeds: the percentile interval alone excludes zero, Welch's test does
    not reject; the interval shown is widened to Welch's, so both say 'within noise'."""
    x, y = np.array([2.0, 2.5, 3.0]), np.array([1.4, 1.6, 1.9])
    boot, welch = bootstrap_ci(x, y, 0.99), welch_ci(x, y, 0.99)
    assert welch.low < 0 < welch.high and boot.within_noise
    assert boot.low <= welch.low and boot.high >= welch.high and boot.low <= 0 <= boot.high


def test_identical_groups_are_within_noise() -> None:
    x = np.array([1.0, 1.2, 0.9])
    assert delta_ci(x, x.copy()).within_noise


def test_auto_is_welch_and_bootstrap_is_on_request() -> None:
    x = np.array([1.0, 1.1, 0.9])
    assert delta_ci(x, x + 1).method == "welch"
    assert delta_ci(x, x + 1, method="bootstrap").method == "bootstrap"


def _percentile_interval_excludes_zero(x: np.ndarray, y: np.ndarray, rng) -> bool:
    mx = x[rng.integers(0, len(x), (2000, len(x)))].mean(axis=1)
    my = y[rng.integers(0, len(y), (2000, len(y)))].mean(axis=1)
    low, high = np.quantile(mx - my, [0.025, 0.975])
    return not low <= 0 <= high


def test_few_seeds_false_positive_rates() -> None:
    """Why `auto` is Welch's t and the bootstrap holds Welch's interval: with 2 seeds a side and
    no true difference, Welch's 95% interval excludes zero at most 5% of the time; the
    percentile bootstrap's alone does so whenever the seeds do not overlap, a third of the
    time."""
    rng = np.random.default_rng(3)
    trials = 600
    samples = rng.normal(size=(trials, 2, 2))
    welch = np.mean([not welch_ci(x, y).within_noise for x, y in samples])
    boot = np.mean([not bootstrap_ci(x, y, resamples=2000).within_noise for x, y in samples])
    alone = np.mean([_percentile_interval_excludes_zero(x, y, rng) for x, y in samples])
    assert welch <= 0.05 + 0.027  # 3 binomial standard deviations
    assert boot == welch
    assert abs(alone - 1 / 3) < 0.06


def test_single_seed_gives_no_interval() -> None:
    ci = delta_ci(np.array([1.0]), np.array([2.0, 2.1]))
    assert ci.method == "none" and ci.delta == pytest.approx(-1.05)
    assert math.isnan(ci.low) and ci.within_noise is None  # no spread known: no test
    empty = delta_ci(np.array([]), np.array([1.0, 2.0]))
    assert math.isnan(empty.delta)


def test_nans_are_dropped() -> None:
    ci = delta_ci(np.array([1.0, np.nan, 1.2, 1.1, 0.9, 1.0]), np.array([2.0] * 5), "welch")
    assert ci.delta == pytest.approx(1.04 - 2.0)


# --- families of comparisons: corrections, pairing ------------------------------------------


@pytest.fixture
def quick_gc(monkeypatch: pytest.MonkeyPatch) -> None:
    """`multipletests` runs a full `gc.collect()` on every Holm call (tens of ms in a test
    process); the simulations below call it thousands of times and allocate no cycles."""
    import gc

    monkeypatch.setattr(gc, "collect", lambda *args: 0)


def _design(rng: np.random.Generator, k: int, same_seeds: bool) -> tuple[dict, Sample]:
    seeds = lambda n: np.arange(n) if same_seeds else rng.permutation(10)[:n]  # noqa: E731
    n = int(rng.integers(2, 7))
    baseline = Sample.of(rng.normal(1.0, 0.05, n), seeds(n))
    variants = {}
    for i in range(k):
        m = n if same_seeds else int(rng.integers(2, 7))
        values = rng.normal(1.0 + rng.choice([0.0, 0.05]), rng.uniform(0.01, 0.1), m)
        variants[f"v{i}"] = Sample.of(values, seeds(m))
    return variants, baseline


@pytest.mark.parametrize("correction", ["holm", "bonferroni", "none"])
def test_family_matches_scipy_and_statsmodels_on_random_designs(correction, quick_gc) -> None:
    """Raw p from scipy's Welch test, corrected p from `multipletests`, intervals from scipy at
    each row's level (Bonferroni's 1 - 0.05/k, Holm's step level), on 150 random designs: the
    interval excludes zero exactly when the corrected p-value is below 0.05."""
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng({"holm": 1, "bonferroni": 2, "none": 3}[correction])
    for _ in range(150):
        k = int(rng.integers(1, 9))
        variants, base = _design(rng, k, same_seeds=False)
        family = compare_family(
            variants, base, correction=correction, pairing="off", detectable=False
        )
        tests = [stats.ttest_ind(v.values, base.values, equal_var=False) for v in variants.values()]
        p = np.array([t.pvalue for t in tests])
        expected = p if correction == "none" else multipletests(p, 0.05, method=correction)[1]
        levels = step_down_levels(list(p), correction)
        if correction != "holm":
            assert levels == [0.95 if correction == "none" else 1 - 0.05 / k] * k
        zipped = zip(family.items(), tests, p, expected, levels, strict=True)
        for (name, ci), t, pi, pa, level in zipped:
            assert ci.method == "welch" and ci.level == pytest.approx(level), name
            assert (ci.p, ci.p_adj) == pytest.approx((pi, pa), rel=1e-12)
            interval = t.confidence_interval(level)
            assert (ci.low, ci.high) == pytest.approx((interval.low, interval.high), rel=1e-12)
            assert ci.within_noise == (pa >= 0.05) == (ci.low <= 0 <= ci.high)


def test_paired_interval_matches_scipy_ttest_rel_on_random_designs(quick_gc) -> None:
    rng = np.random.default_rng(4)
    for _ in range(150):
        k = int(rng.integers(1, 6))
        variants, base = _design(rng, k, same_seeds=True)
        family = compare_family(variants, base, correction="bonferroni", detectable=False)
        for name, ci in family.items():
            test = stats.ttest_rel(variants[name].values, base.values)
            interval = test.confidence_interval(1 - 0.05 / k if k > 1 else 0.95)
            assert ci.method == "paired" and ci.p == pytest.approx(test.pvalue, rel=1e-12)
            assert (ci.low, ci.high) == pytest.approx((interval.low, interval.high), rel=1e-12)


def test_pairing_aligns_by_seed_and_falls_back_to_welch_when_seeds_differ() -> None:
    base = Sample.of([1.0, 2.0, 3.0], [0, 1, 2])
    shuffled = Sample.of([3.1, 1.1, 2.2], [2, 0, 1])  # seed order differs from the baseline's
    ci = compare_family({"v": shuffled}, base)["v"]
    d = np.array([1.1, 2.2, 3.1]) - np.array([1.0, 2.0, 3.0])
    half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    assert ci.method == "paired" and ci.delta == pytest.approx(d.mean())
    assert (ci.low, ci.high) == pytest.approx((d.mean() - half, d.mean() + half))
    other = Sample.of([1.1, 2.2, 3.1], [0, 1, 5])
    welch = compare_family({"v": other}, base)["v"]
    assert welch.method == "welch" and welch.note == "unpaired: the seeds differ"
    forced = compare_family({"v": other}, base, pairing="on")["v"]  # seeds 0 and 1 shared
    assert forced.method == "paired"
    assert forced.delta == pytest.approx(np.mean([1.1 - 1.0, 2.2 - 2.0]))
    # one seed more on one side: paired on the common seeds, the extra one named
    extra = Sample.of([1.1, 2.2, 3.1, 9.0], [0, 1, 2, 3])
    common = compare_family({"v": extra}, base)["v"]
    assert common.method == "paired" and common.pairs == 3
    assert common.delta == pytest.approx(d.mean())
    assert common.note == "paired on seeds 0-2, left out: the variant's seed 3"
    fewer = compare_family({"v": base}, Sample.of([1, 2, 3, 4, 5], [0, 1, 2, 7, 8]))["v"]
    assert fewer.note == "paired on seeds 0-2, left out: the baseline's seeds 7, 8"
    assert compare_family({"v": shuffled}, base)["v"].note == ""  # the same seeds: nothing left
    off = compare_family({"v": shuffled}, base, pairing="off")["v"]
    assert off.method == "welch" and off.note == ""
    # Reruns of a seed (A/A) are averaged before pairing.
    rerun = Sample.of([1.0, 1.2, 2.0, 3.0], [0, 0, 1, 2])
    assert compare_family({"v": shuffled}, rerun)["v"].delta == pytest.approx(
        np.mean([1.1 - 1.1, 2.2 - 2.0, 3.1 - 3.0])
    )


def test_pairing_removes_the_shared_seed_noise() -> None:
    """Seed effects shared by both arms (the data order) cancel in the paired interval."""
    rng = np.random.default_rng(5)
    shared = rng.normal(0, 0.05, 5)
    base = Sample.of(2.0 + shared + rng.normal(0, 0.002, 5), range(5))
    variant = Sample.of(1.99 + shared + rng.normal(0, 0.002, 5), range(5))
    paired = compare_family({"v": variant}, base)["v"]
    welch = compare_family({"v": variant}, base, pairing="off")["v"]
    assert paired.high - paired.low < (welch.high - welch.low) / 5
    assert not paired.within_noise and welch.within_noise


@pytest.mark.slow
def test_holm_holds_the_family_wise_false_positive_rate(quick_gc) -> None:
    """5 variants × 3 seeds, no real difference, 4000 experiments: uncorrected, at least one
    false call in about 14% of them; with Holm at most 5% (± 1%)."""
    rng = np.random.default_rng(6)
    trials, any_holm, any_none = 4000, 0, 0
    for values in rng.normal(size=(trials, 6, 3)):
        base = Sample.of(values[0])
        variants = {f"v{i}": Sample.of(v) for i, v in enumerate(values[1:])}
        holm = compare_family(variants, base, correction="holm", detectable=False)
        none = compare_family(variants, base, correction="none", detectable=False)
        any_holm += any(not ci.within_noise for ci in holm.values())
        any_none += any(not ci.within_noise for ci in none.values())
    print(
        f"family-wise false-positive rate: holm {any_holm / trials:.3f}, none {any_none / trials:.3f}"
    )
    assert any_holm / trials <= 0.05 + 0.01
    assert 0.10 < any_none / trials < 0.18  # 1 - 0.95^5 = 23% if the tests were independent


# --- noise and power --------------------------------------------------------------------------


def test_pooled_noise_and_its_chi_square_interval() -> None:
    groups = [np.array([2.10, 2.20, 2.15]), np.array([2.00, 2.02, 2.04]), np.array([5.0])]
    noise = pooled_noise(groups)
    assert noise.df == 4 and noise.sd == pytest.approx(math.sqrt((0.05**2 * 2 + 0.02**2 * 2) / 4))
    # The interval inverts df·s²/σ² ~ chi²(df): at its ends, the statistic sits at the quantiles.
    s2 = noise.sd**2
    assert stats.chi2.cdf(4 * s2 / noise.high**2, 4) == pytest.approx(0.025)
    assert stats.chi2.cdf(4 * s2 / noise.low**2, 4) == pytest.approx(0.975)
    assert math.isnan(pooled_noise([np.array([1.0])]).sd)


def test_pooled_noise_covers_the_true_sd_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(8)
    trials = 2000
    covered = sum(
        (n := pooled_noise(list(rng.normal(0, 0.3, (4, 3))))).low <= 0.3 <= n.high
        for _ in range(trials)
    )
    assert abs(covered / trials - 0.95) < 0.015


def test_within_noise_states_the_smallest_detectable_difference() -> None:
    base, same = Sample.of([1.0, 1.1, 0.9]), Sample.of([1.05, 0.95, 1.0])
    ci = compare_family({"v": same}, base, noise_sd=0.1)["v"]
    sd_v, sd_b = np.std([1.05, 0.95, 1.0], ddof=1), np.std([1.0, 1.1, 0.9], ddof=1)
    assert ci.within_noise and ci.mde == pytest.approx(
        detectable_difference(3, sd_v, design="welch", sd_baseline=sd_b)
    )


# --- the defects of the comparisons audit: each fails on the earlier code -------------------


def test_step_down_levels_follow_holms_steps() -> None:
    """p 0.001, 0.02, 0.3 over 3 tests: steps at 0.05/3 and 0.05/2 reject, the third stops;
    p 0.001, 0.03, 0.04: the second step (0.025) stops, the third gets its level."""
    assert step_down_levels([0.02, 0.001, 0.3], "holm") == pytest.approx(
        [1 - 0.05 / 2, 1 - 0.05 / 3, 1 - 0.05]
    )
    assert step_down_levels([0.001, 0.03, 0.04], "holm") == pytest.approx(
        [1 - 0.05 / 3, 1 - 0.05 / 2, 1 - 0.05 / 2]
    )
    assert step_down_levels([0.2, 0.001], "bonferroni") == [0.975, 0.975]
    assert step_down_levels([0.2, 0.001], "none") == [0.95, 0.95]


def test_an_interval_never_disagrees_with_its_holm_verdict(quick_gc) -> None:
    """A family where Holm rejects a comparison whose Bonferroni-level interval contains zero
    (the study's 'learned absolute vs RoPE': agrees beside an interval through 0): the interval
    shown excludes zero exactly when the verdict is a difference."""
    rng = np.random.default_rng(11)
    found = 0
    for _ in range(400):
        base = Sample.of(rng.normal(0, 1, 4), range(4))
        variants = {
            "strong": Sample.of(base.values + rng.normal(3.0, 0.3, 4), range(4)),
            "weak": Sample.of(base.values + rng.normal(1.2, 0.5, 4), range(4)),
        }
        family = compare_family(variants, base, detectable=False)
        weak = family["weak"]
        bonferroni = stats.ttest_rel(variants["weak"].values, base.values).confidence_interval(
            0.975
        )
        if weak.p_adj < 0.05 and bonferroni.low <= 0:
            found += 1
        for ci in family.values():
            assert (not ci.within_noise) == (not ci.low <= 0 <= ci.high)
    assert found > 0  # the case the old Bonferroni-level intervals got wrong did occur


def _null_family_rate(
    method: str, pairing: str, trials: int, seed: int, shared_sd: float = 0.0
) -> float:
    """The share of null experiments (5 variants × 3 seeds and a baseline, no difference) with
    at least one comparison called different under Holm."""
    rng = np.random.default_rng(seed)
    calls = 0
    for _ in range(trials):
        shared = rng.normal(0, shared_sd, 3)  # a seed's effect, common to every arm
        values = shared + rng.normal(size=(6, 3))
        base = Sample.of(values[0], range(3))
        variants = {f"v{i}": Sample.of(v, range(3)) for i, v in enumerate(values[1:])}
        family = compare_family(variants, base, method=method, pairing=pairing, detectable=False)  # type: ignore[arg-type]
        calls += any(ci.within_noise is False for ci in family.values())
    return calls / trials


@pytest.mark.slow
def test_bootstrap_verdicts_honour_holm(quick_gc) -> None:
    """`--ci bootstrap`, 5 variants × 3 seeds, no difference: at most 5% family-wise false
    calls (the percentile intervals alone made 39%)."""
    rate = _null_family_rate("bootstrap", "auto", trials=400, seed=12)
    print(f"bootstrap family-wise false-positive rate {rate:.3f}")
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)


@pytest.mark.slow
def test_holm_holds_the_family_wise_rate_on_the_default_paired_path(quick_gc) -> None:
    """The default design: seeds shared, paired t, Holm. 5 variants × 3 seeds, 4000 null
    experiments: at most 5% family-wise (within 3 Monte-Carlo sd)."""
    rate = _null_family_rate("auto", "auto", trials=4000, seed=13, shared_sd=1.0)
    print(f"paired-path family-wise false-positive rate {rate:.3f}")
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000)


def test_welch_counts_a_seeds_reruns_once() -> None:
    """Seed 0 rerun 3 times: the Welch interval and p are those of the 3 per-seed means, as
    the paired path's are (the reruns are one observation, not three)."""
    variant = Sample.of([1.00, 1.01, 1.02, 1.10, 1.20], [0, 0, 0, 1, 2])
    baseline = Sample.of([0.9, 1.0, 1.05], [5, 6, 7])  # other seeds: not paired
    ci = compare_family({"v": variant}, baseline, detectable=False)["v"]
    means = np.array([1.01, 1.10, 1.20])
    test = stats.ttest_ind(means, baseline.values, equal_var=False)
    assert ci.method == "welch" and ci.p == pytest.approx(test.pvalue, rel=1e-12)
    assert ci.delta == pytest.approx(means.mean() - baseline.values.mean())
    boot = delta_ci(variant.values, baseline.values, "bootstrap", variant_seeds=variant.seeds,
                    baseline_seeds=baseline.seeds)  # fmt: skip
    assert boot.p == pytest.approx(test.pvalue, rel=1e-12)


def test_untested_rows_have_no_verdict() -> None:
    """A value of inf: no t-test, hence no verdict (it was called better or worse)."""
    base = Sample.of([1.0, 1.1, 0.9], range(3))
    family = compare_family({"inf": Sample.of([np.inf, 1.0, 1.1], range(3))}, base)
    assert family["inf"].within_noise is None and math.isnan(family["inf"].p_adj)
    assert delta_ci([1.0], [1.0, 2.0]).within_noise is None


def test_paired_rows_count_their_pairs() -> None:
    base = Sample.of([1.0, 1.1, 0.9, 1.3], [0, 1, 2, 3])
    family = compare_family({"v": Sample.of([1.1, 1.0, 1.0], [0, 1, 2])}, base, pairing="on")
    assert family["v"].method == "paired" and family["v"].pairs == 3


def test_every_tested_row_carries_the_simultaneous_bonferroni_interval() -> None:
    """Holm gives the later steps narrower intervals; the simultaneous interval, which decides
    equivalence, is every row's paired t interval at 1 - alpha/k (k = 3 tested rows; the
    one-seed row is untested and has none)."""
    seeds = [0, 1, 2, 3]
    base = Sample.of([2.00, 2.10, 2.05, 2.15], seeds)
    shifts = {"clear": [0.30, 0.31, 0.29, 0.30], "small": [0.02, 0.05, -0.01, 0.03]}
    variants = {name: Sample.of(base.values + np.array(d), seeds) for name, d in shifts.items()}
    variants["same"] = Sample.of(base.values + np.array([0.01, -0.02, 0.0, 0.005]), seeds)
    variants["lonely"] = Sample.of([2.0], [0])
    family = compare_family(variants, base, detectable=False)
    assert family["clear"].level == pytest.approx(1 - 0.05 / 3)
    assert family["same"].level < 1 - 0.05 / 3  # a later Holm step: a narrower interval
    for name in ("clear", "small", "same"):
        expected = stats.ttest_rel(variants[name].values, base.values).confidence_interval(
            1 - 0.05 / 3
        )
        ci = family[name]
        assert (ci.simultaneous_low, ci.simultaneous_high) == pytest.approx(
            (expected.low, expected.high), rel=1e-12
        ), name
    assert math.isnan(family["lonely"].simultaneous_low)
