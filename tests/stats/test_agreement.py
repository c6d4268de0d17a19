"""Decision agreement and lr sensitivity against computations by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from agreement_by_hand import by_hand_agreement

from minimind.stats.agreement import bootstrap_agreement, lr_sensitivity, ranking_agreement

SMALL = np.array([[2.50, 2.52, 2.55, 2.49], [2.51, 2.50, 2.56, 2.52], [2.48, 2.53, 2.54, 2.50]])
LARGE = np.array([[2.30, 2.28, 2.36, 2.33], [2.31, 2.30, 2.35, 2.32], [2.29, 2.29, 2.37, 2.31]])


def test_the_agreement_is_the_share_of_pairs_ordered_alike() -> None:
    # means small: 2.497 2.517 2.550 2.503; large: 2.300 2.290 2.360 2.320
    # pairs (0,1) flips, (0,2) same, (0,3) same, (1,2) same, (1,3) flips, (2,3) same: 4/6
    assert ranking_agreement(SMALL, LARGE) == pytest.approx(4 / 6)
    assert ranking_agreement(SMALL, LARGE) == pytest.approx(by_hand_agreement(SMALL, LARGE))
    assert ranking_agreement(SMALL, SMALL + 1.0) == 1.0
    assert ranking_agreement(np.ones((2, 3)), LARGE[:2, :3]) == 0.5  # all tied: half each


def test_the_bootstrap_interval_equals_a_resampling_by_hand() -> None:
    value, low, high = bootstrap_agreement(SMALL, LARGE, resamples=500, seed=3)
    rng = np.random.default_rng(3)
    draws = rng.integers(0, 3, (500, 3))
    replicates = [by_hand_agreement(SMALL[d], LARGE[d]) for d in draws]
    assert value == pytest.approx(4 / 6)
    assert (low, high) == pytest.approx(tuple(np.quantile(replicates, [0.025, 0.975])))
    assert low <= value <= high


def test_lr_sensitivity_is_wortsmans_formula() -> None:
    initial = math.log(2048)  # 7.62: a uniform model's loss over a 2048-token vocabulary
    final = np.array([[4.1, 3.9, 4.4, 9.0], [4.0, 3.95, np.nan, 5.0]])
    # seed 0: min(., 7.62) = 4.1 3.9 4.4 7.62, mean 5.005 - best 3.9; seed 1: diverged -> 7.62
    expected = [np.mean([4.1, 3.9, 4.4, initial]) - 3.9, np.mean([4.0, 3.95, initial, 5.0]) - 3.95]
    np.testing.assert_allclose(lr_sensitivity(final, initial), expected, rtol=1e-12)
    assert lr_sensitivity(np.full((1, 3), 4.0), initial)[0] == 0.0
