"""The confidence-interval logic of `minimind compare`, on synthetic numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from minimind.compare.stats import bootstrap_ci, delta_ci, welch_ci


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
    # The resampled difference of means can reach no further than the extremes of each group.
    assert a.low >= x.min() - y.max() and a.high <= x.max() - y.min()


def test_bootstrap_agrees_with_welch_for_large_n() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.normal(1.0, 1.0, 400), rng.normal(0.8, 2.0, 300)
    boot, welch = bootstrap_ci(x, y), welch_ci(x, y)
    width = welch.high - welch.low
    assert abs(boot.low - welch.low) < 0.05 * width and abs(boot.high - welch.high) < 0.05 * width


def test_identical_groups_are_within_noise() -> None:
    x = np.array([1.0, 1.2, 0.9])
    assert delta_ci(x, x.copy()).within_noise


def test_auto_is_welch_and_bootstrap_is_on_request() -> None:
    x = np.array([1.0, 1.1, 0.9])
    assert delta_ci(x, x + 1).method == "welch"
    assert delta_ci(x, x + 1, method="bootstrap").method == "bootstrap"


def test_few_seeds_false_positive_rates() -> None:
    """Why `auto` is Welch's t: with 2 seeds a side and no true difference, Welch's 95% interval
    excludes zero at most 5% of the time; the percentile bootstrap's does so whenever the seeds
    do not overlap, which happens a third of the time."""
    rng = np.random.default_rng(3)
    trials = 600
    samples = rng.normal(size=(trials, 2, 2))
    welch = np.mean([not welch_ci(x, y).within_noise for x, y in samples])
    boot = np.mean([not bootstrap_ci(x, y, resamples=2000).within_noise for x, y in samples])
    assert welch <= 0.05 + 0.027  # 3 binomial standard deviations
    assert abs(boot - 1 / 3) < 0.06


def test_single_seed_gives_no_interval() -> None:
    ci = delta_ci(np.array([1.0]), np.array([2.0, 2.1]))
    assert ci.method == "none" and ci.delta == pytest.approx(-1.05)
    assert math.isnan(ci.low) and ci.within_noise  # no spread known: cannot call it real
    empty = delta_ci(np.array([]), np.array([1.0, 2.0]))
    assert math.isnan(empty.delta)


def test_nans_are_dropped() -> None:
    ci = delta_ci(np.array([1.0, np.nan, 1.2, 1.1, 0.9, 1.0]), np.array([2.0] * 5), "welch")
    assert ci.delta == pytest.approx(1.04 - 2.0)
