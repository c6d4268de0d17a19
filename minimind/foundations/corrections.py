"""The multiple-comparison corrections a comparison can apply over its family of deltas
(docs/statistics.md): their names, one list for the spec's `power:` hint, `minimind compare
--correction` and a study manifest. `stats.intervals` applies them.

A leaf of its own so that the command line lists the names without importing the spec or
scipy.
"""

from __future__ import annotations

from typing import Literal, get_args

Correction = Literal["holm", "bonferroni", "none"]
CORRECTIONS: tuple[Correction, ...] = get_args(Correction)
DEFAULT_CORRECTION: Correction = "holm"
