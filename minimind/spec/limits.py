"""The `limits:` section: how much work a spec may ask for before it is refused (exit 2), each
bound raised or lifted by the spec itself (`-o limits.max_variants=20000`).

    limits:
      max_variants: 1000     # ablation cells × ladder rungs, counted before any is built
      over_memory: refuse    # a variant estimated past this host's memory; `warn` runs it anyway

Like `launcher:`, it says nothing of what trains: outside the spec's hash and its MLflow params.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field

from minimind.foundations.strict_config import StrictNumbers

DEFAULT_MAX_VARIANTS = 1000


class LimitsConfig(StrictNumbers):
    model_config = ConfigDict(extra="forbid")

    max_variants: int = Field(default=DEFAULT_MAX_VARIANTS, ge=1)
    over_memory: Literal["refuse", "warn"] = "refuse"


def variant_count(ablate: Mapping[str, list[Any]], rungs: int) -> int:
    """How many variants `ablate` makes at each of `rungs` ladder rungs (1 without a ladder),
    from the axes' sizes alone: nothing is built."""
    return math.prod(len(values) for values in ablate.values()) * max(rungs, 1)
