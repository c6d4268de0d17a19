"""The effective compute multiplier on synthetic curves whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from minimind.stats.compute import compute_multiplier, reach

STEPS = np.arange(10, 210, 10, dtype=float)


def test_reach_interpolates_in_log_compute_between_evaluations() -> None:
    y = 5.0 - np.log(STEPS)  # linear in log compute: interpolation is exact
    assert reach(STEPS, y, 5.0 - math.log(150.0)) == (pytest.approx(150.0), "inside")
    assert reach(STEPS, y, 5.0 - math.log(145.0)) == (pytest.approx(145.0), "inside")
    assert reach(STEPS, y, -1.0) == (200.0, "beyond")  # never reached: the curve's end
    assert reach(STEPS, y, 6.0) == (10.0, "before")  # reached before the first evaluation
    assert reach(STEPS, -y, math.log(150.0) - 5.0, maximize=True)[0] == pytest.approx(150.0)
    # The first crossing counts when a noisy curve crosses twice: halfway in log x.
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert reach(x, np.array([3.0, 1.0, 2.0, 0.5]), 2.0)[0] == pytest.approx(math.sqrt(2.0))
    # An evaluation at compute 0 has no logarithm: linear there.
    assert reach(np.array([0.0, 10.0]), np.array([4.0, 2.0]), 3.0)[0] == pytest.approx(5.0)


def test_log_interpolation_reads_a_power_law_curve_from_sparse_evaluations() -> None:
    """Loss 2 + 10·C^-0.5 evaluated at 8 doubling budgets: the compute that reaches each
    target, read between evaluations, is within about 3% in log compute; a straight line in C
    read it up to 9% high (always high: the curve is convex in C)."""
    compute = 1e3 * 2.0 ** np.arange(8)
    loss = 2.0 + 10.0 * compute**-0.5
    true = np.geomspace(1.2e3, 1.0e5, 25)
    read = np.array([reach(compute, loss, 2.0 + 10.0 * c**-0.5)[0] for c in true])
    linear = [np.interp(-(2.0 + 10.0 * c**-0.5), -loss, compute) for c in true]
    assert np.max(np.abs(read / true - 1)) < 0.035
    assert np.max(np.array(linear) / true - 1) > 0.09 and np.min(np.array(linear) / true) >= 1


def test_power_law_curve_gives_the_known_multiplier() -> None:
    """Baseline loss 2 + 10·C^-0.5 on a fine grid of compute C; a variant that reaches the
    baseline's loss at 1.5 C with C spent has multiplier 1.5 (up to the grid's interpolation)."""
    compute = np.linspace(1e3, 1e5, 2000)
    loss = 2.0 + 10.0 * compute**-0.5
    spent = np.array([2e4, 3e4, 5e4])
    finals = 2.0 + 10.0 * (1.5 * spent) ** -0.5
    m = compute_multiplier([(compute, loss)] * len(finals), finals, spent)
    assert m.where == "inside" and m.value == pytest.approx(1.5, rel=1e-4)


def test_interval_is_a_t_interval_of_the_log_multipliers() -> None:
    y = 5.0 - np.log(STEPS)
    true = np.array([1.2, 1.5, 1.4, 1.1])  # per seed, each variant seed spent 100 steps
    finals = 5.0 - np.log(100 * true)
    m = compute_multiplier([(STEPS, y)] * 4, finals, np.full(4, 100.0), level=0.9)
    logs = np.log(true)
    half = stats.t.ppf(0.95, 3) * logs.std(ddof=1) / 2
    assert m.value == pytest.approx(math.exp(logs.mean()))
    assert (m.low, m.high) == pytest.approx(
        (math.exp(logs.mean() - half), math.exp(logs.mean() + half))
    )
    assert m.n == 4


def test_outside_the_curve_is_said_and_bounded() -> None:
    y = 5.0 - 0.01 * STEPS
    better = compute_multiplier([(STEPS, y)] * 2, [1.0, 1.1], [100.0, 100.0])
    assert better.where == "beyond" and better.value == pytest.approx(2.0)  # 200 / 100: a bound
    worse = compute_multiplier([(STEPS, y)] * 2, [9.0, 9.5], [100.0, 100.0])
    assert worse.where == "before" and worse.value == pytest.approx(0.1)
    assert compute_multiplier([(STEPS[:0], y[:0])], [1.0], [1.0]).where == "none"


def test_seeds_beyond_and_before_the_curve_bound_nothing() -> None:
    """One seed ends better than the baseline ever got (a lower bound), the other worse than
    its first evaluation (an upper bound): their mean is neither, and is not called '≥'."""
    y = 5.0 - 0.01 * STEPS
    mixed = compute_multiplier([(STEPS, y)] * 2, [1.0, 9.0], [100.0, 100.0])
    assert mixed.where == "mixed"
    inside_and_beyond = compute_multiplier([(STEPS, y)] * 2, [1.0, 4.0], [100.0, 100.0])
    assert inside_and_beyond.where == "beyond"  # a mean of a value and a lower bound
