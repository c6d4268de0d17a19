"""What every suite is given: the device, the quick switch and how many rounds to measure."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class BenchContext:
    """`rounds` timed rounds (pairs, for two candidates) after `warmup` untimed calls of each.

    `quick`: the smallest sizes only, for a smoke run (figures indicative, not reportable).
    """

    device: torch.device
    quick: bool = False
    rounds: int = 5
    warmup: int = 1
    log: Callable[[str], None] = field(default=_to_stderr)
