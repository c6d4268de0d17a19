"""The default multiple of a ladder's top rung's compute that each comparison's multiplier is
extrapolated to (docs/statistics.md, "Ladders"): one value for `minimind compare
--extrapolate`, `compare_ladder` and a study manifest's ladders.

A leaf of its own so that the command line shows it without importing pandas or scipy.
"""

from __future__ import annotations

DEFAULT_EXTRAPOLATION = 10.0
