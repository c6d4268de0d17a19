"""Side-by-side timing: candidates run in alternation, and ratios are taken round by round.

After `warmup` untimed calls of each candidate, round r calls every candidate once. Whatever
slows the machine during round r (another process, a frequency change) slows every candidate of
that round alike, so the ratio of their round-r times is robust to it, and the median of those
per-round ratios is reported. Comparing medians taken separately would not cancel that noise.

The order within a round rotates (A B, B A, A B, ... for two; A B C, B C A, C A B, ... for
three), so that no candidate always runs first or last: on a shared machine the position in a
round can bias a candidate by several percent (an A/A comparison shows it).

A round times a block of `steps` consecutive calls of a candidate and counts block time / steps.
On CUDA the block is timed by two CUDA events recorded on the stream around it, with one host wait
at its end (`EventStopwatch`): nothing synchronises between the calls, so the host queues step
k + 1 while the GPU runs step k, as in a training loop. Timing each call alone, synchronised on
both sides, would charge every call the host's launch latency that a loop overlaps. Elsewhere the
block is timed by the wall clock (`WallStopwatch`; CPU work is done when its call returns).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import torch

from minimind.training.device import synchronize

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11


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


class Stopwatch(Protocol):
    """Times a block of device work: `start()` before it, `stop()` after it returns the seconds."""

    def start(self) -> None: ...
    def stop(self) -> float: ...


class WallStopwatch:
    """The wall clock, with the device synchronised before both reads."""

    def __init__(
        self, device: torch.device, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.device, self.clock = device, clock
        self._start = 0.0

    def start(self) -> None:
        synchronize(self.device)
        self._start = self.clock()

    def stop(self) -> float:
        synchronize(self.device)
        return self.clock() - self._start


class Event(Protocol):
    """What `EventStopwatch` needs of `torch.cuda.Event(enable_timing=True)`."""

    def record(self) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_time(self, end: Self) -> float: ...  # milliseconds, to an event of its kind


def _cuda_event() -> Event:
    return torch.cuda.Event(enable_timing=True)


class EventStopwatch:
    """Two events recorded on the current stream around the block; the host waits once, in
    `stop`, for the end event. The time is measured on the GPU, from the first event to the second."""

    def __init__(self, new_event: Callable[[], Event] = _cuda_event) -> None:
        self.new_event = new_event
        self._start: Event | None = None

    def start(self) -> None:
        self._start = self.new_event()
        self._start.record()

    def stop(self) -> float:
        if self._start is None:
            raise RuntimeError("stop() before start()")
        end = self.new_event()
        end.record()
        end.synchronize()
        return self._start.elapsed_time(end) / 1e3


def stopwatch(device: torch.device, clock: Callable[[], float] = time.perf_counter) -> Stopwatch:
    """CUDA events on CUDA, the synchronised wall clock elsewhere."""
    return EventStopwatch() if device.type == "cuda" else WallStopwatch(device, clock)


def time_block(fn: Callable[[], object], steps: int, watch: Stopwatch) -> float:
    """Seconds per call of `fn` over `steps` consecutive calls timed as one block."""
    watch.start()
    for _ in range(steps):
        fn()
    return watch.stop() / steps


def alternate(
    timers: Mapping[str, Callable[[], float]],
    rounds: int,
    warmup: int = 1,
    on_round: Callable[[int], None] | None = None,
) -> dict[str, list[float]]:
    """Seconds per round of each timer (a callable that runs its candidate and returns the
    seconds to count), [rounds] each: `warmup` discarded calls of each, then `rounds` rounds that
    call every timer once, round r in the mapping's order rotated left by r; `on_round(r)` after
    the r-th (1-based), for a progress display."""
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
        if on_round is not None:
            on_round(r + 1)
    return times


def interleave(
    candidates: Mapping[str, Callable[[], object]],
    device: torch.device,
    rounds: int,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    *,
    steps: int = 1,
    watch: Stopwatch | None = None,
    on_round: Callable[[int], None] | None = None,
) -> dict[str, list[float]]:
    """`alternate` with each candidate timed per round as a block of `steps` consecutive calls
    (`time_block`, by `watch`: `stopwatch(device, clock)` unless given); seconds per call.

    Warm-up covers the allocator, kernel choice and autotuning; compilation should happen before
    (see `warm_up`), so that its time can be reported.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    watch = watch if watch is not None else stopwatch(device, clock)
    timers = {
        name: functools.partial(time_block, fn, steps, watch) for name, fn in candidates.items()
    }
    return alternate(timers, rounds, warmup, on_round)


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
