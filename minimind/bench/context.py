"""What every suite is given: the device, the quick switch and how many rounds to measure."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


CUDA_STEPS_PER_ROUND = 12
"""Consecutive training steps per timed block on CUDA (`minimind.training.timing`)."""


@dataclass(frozen=True)
class BenchContext:
    """`rounds` timed rounds (pairs, for two candidates) after `warmup` untimed calls of each.

    `quick`: the smallest sizes only, for a smoke run (figures indicative, not reportable).
    `steps_per_round`: consecutive steps timed as one block per round (None: CUDA_STEPS_PER_ROUND
    on CUDA, where steps overlap the host's launches, 1 elsewhere).
    """

    device: torch.device
    quick: bool = False
    rounds: int = 5
    warmup: int = 1
    log: Callable[[str], None] = field(default=_to_stderr)
    steps_per_round: int | None = None

    @property
    def steps(self) -> int:
        """Steps per timed block on this context's device."""
        if self.steps_per_round is not None:
            return self.steps_per_round
        return CUDA_STEPS_PER_ROUND if self.device.type == "cuda" else 1
