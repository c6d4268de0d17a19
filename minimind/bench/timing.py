"""Side-by-side timing: candidates run in alternation, and ratios are taken round by round.

After `warmup` untimed calls of each candidate, round r calls every candidate once. Whatever
slows the machine during round r (another process, a frequency change) slows every candidate of
that round alike, so the ratio of their round-r times is robust to it, and the median of those
per-round ratios is reported. Comparing medians taken separately would not cancel that noise.

The order within a round rotates (A B, B A, A B, ... for two; A B C, B C A, C A B, ... for
three), so that no candidate always runs first or last: on a shared machine the position in a
round can bias a candidate by several percent (an A/A comparison shows it).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import torch

from minimind.device import synchronize


def time_call(
    fn: Callable[[], object],
    device: torch.device,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds taken by `fn()`, with the device synchronized before both clock reads."""
    synchronize(device)
    start = clock()
    fn()
    synchronize(device)
    return clock() - start


def alternate(
    timers: Mapping[str, Callable[[], float]], rounds: int, warmup: int = 1
) -> dict[str, list[float]]:
    """Seconds per round of each timer (a callable that runs its candidate and returns the
    seconds to count), [rounds] each: `warmup` discarded calls of each, then `rounds` rounds that
    call every timer once, round r in the mapping's order rotated left by r."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    for timer in timers.values():
        for _ in range(warmup):
            timer()
    names = list(timers)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timers[name]())
    return times


def interleave(
    candidates: Mapping[str, Callable[[], object]],
    device: torch.device,
    rounds: int,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """`alternate` with each candidate's call timed whole by `time_call`.

    Warm-up covers the allocator, kernel choice and autotuning; compilation should happen before
    (see `warm_up`), so that its time can be reported.
    """
    timers = {
        name: functools.partial(time_call, fn, device, clock) for name, fn in candidates.items()
    }
    return alternate(timers, rounds, warmup)


def warm_up(fn: Callable[[], object], device: torch.device, calls: int = 2) -> float:
    """Call `fn` `calls` times untimed by `interleave`; return the seconds of the first call.

    Used for compiled candidates, whose first call compiles (and is reported as compile time).
    """
    first = time_call(fn, device)
    for _ in range(calls - 1):
        fn()
    return first


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """Median over rounds of numerator_r / denominator_r.

    paired_ratio(baseline_times, candidate_times) is the candidate's speedup (> 1: faster);
    paired_ratio(part_times, whole_times) is a share (batch sampling in a step).
    """
    if len(numerator) != len(denominator) or not numerator:
        raise ValueError(
            f"need equal, non-empty rounds, got {len(numerator)} and {len(denominator)}"
        )
    return median([n / d for n, d in zip(numerator, denominator, strict=True)])
