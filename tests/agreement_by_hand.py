"""Decision agreement computed by hand, the reference the package's is tested against."""

from __future__ import annotations

import itertools

import numpy as np


def by_hand_agreement(small: np.ndarray, large: np.ndarray) -> float:
    """The share of arm pairs whose seed means [seeds, arms] order alike at both sizes (a tie
    at either counts half)."""
    a, b = small.mean(axis=0), large.mean(axis=0)
    scores = []
    for i, j in itertools.combinations(range(len(a)), 2):
        da, db = a[i] - a[j], b[i] - b[j]
        scores.append(0.5 if da == 0 or db == 0 else float((da > 0) == (db > 0)))
    return sum(scores) / len(scores)
