"""Whether decisions made at a small size or budget are those made at the largest: the share
of arm pairs ranked the same way (DataDecide's decision accuracy, Magnusson et al. 2025) with a
bootstrap interval over seeds, and Wortsman et al. (2023)'s lr sensitivity of an arm.

Seeds pair across the two scales (seed k of every arm at every rung and budget shares its
batches), so a bootstrap resample draws seeds, the same ones for both scales and every arm.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def ranking_agreement(small: ArrayLike, large: ArrayLike) -> float:
    """The share of arm pairs (i < j) that the mean over seeds orders the same way at both
    scales. small, large: [seeds, arms] (one value per seed and arm; lower or higher better
    alike: only the order counts). A pair tied at either scale counts half. NaN for fewer than
    2 arms."""
    a, b = (
        np.nanmean(np.asarray(small, float), axis=0),
        np.nanmean(np.asarray(large, float), axis=0),
    )
    return float(_agreement(a[None, :], b[None, :])[0])


def _agreement(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[resamples]: `ranking_agreement` of arm means a, b [resamples, arms]."""
    arms = a.shape[1]
    if arms < 2:
        return np.full(a.shape[0], np.nan)
    i, j = np.triu_indices(arms, k=1)
    sa, sb = np.sign(a[:, i] - a[:, j]), np.sign(b[:, i] - b[:, j])
    score = np.where((sa == 0) | (sb == 0), 0.5, (sa == sb).astype(float))
    return score.mean(axis=1)


def bootstrap_agreement(
    small: ArrayLike,
    large: ArrayLike,
    *,
    resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """`ranking_agreement` and its percentile bootstrap interval at `level` over seeds: each
    resample draws as many seeds as there are, with replacement, from
    `np.random.default_rng(seed).integers(0, seeds, (resamples, seeds))`, the same seeds at both
    scales. small, large: [seeds, arms], row k the same seed at both. (value, low, high)."""
    a, b = np.asarray(small, float), np.asarray(large, float)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"small and large must be [seeds, arms] of one shape, got {a.shape} and {b.shape}")  # fmt: skip
    draws = np.random.default_rng(seed).integers(0, a.shape[0], (resamples, a.shape[0]))
    replicates = _agreement(np.nanmean(a[draws], axis=1), np.nanmean(b[draws], axis=1))
    tail = (1.0 - level) / 2
    low, high = np.quantile(replicates, [tail, 1.0 - tail])
    return ranking_agreement(a, b), float(low), float(high)


def lr_sensitivity(final: ArrayLike, initial: float) -> np.ndarray:
    """Wortsman et al. (2023)'s lr sensitivity per seed: the mean over the lr grid of
    min(final loss, initial loss) − the best final loss over the grid. final: [seeds, lrs]
    (NaN or inf for a diverged run: counted at the initial loss); initial: the loss at
    initialisation (ln vocab for a uniform model, in the final loss's unit). Lower is less
    sensitive; 0 when every lr reaches the best. Returns [seeds]."""
    capped = capped_losses(final, initial)
    return capped.mean(axis=1) - capped.min(axis=1)


def capped_losses(final: ArrayLike, initial: float) -> np.ndarray:
    """min(final loss, initial loss), a diverged run (NaN or inf) at the initial loss: the
    losses Wortsman et al.'s sensitivity averages; same shape as `final`."""
    f = np.asarray(final, float)
    return np.where(np.isfinite(f), np.minimum(f, initial), initial)
