"""Work run N at a time on this host: the one mechanism behind `minimind run --jobs`, a sweep's
local workers and a study's streams.

    outcomes = run_in_slots([Job("a", train, (spec, "a")), ...], [Placement(None, 1)] * 2)

Each slot is a spawned process with a place (a visible GPU, its CPU threads) that runs jobs one
after another, each the call `fn(*args)`. A slot is a one-worker `ProcessPoolExecutor`, not a
worker of one shared pool: when a worker of a shared pool dies (`kill -9`, the OOM killer), the
executor marks the pool broken and terminates every other worker with it, while here a dead
worker costs its own job alone (its process group is killed with it, a job's child processes
included), and its slot starts a new process for the next one. A job that raises costs itself
alone too: its outcome says what it raised.

Every slot's process has its own process group, so that a terminal's Ctrl-C reaches only this
process, which passes the stop on once (`_stop`): the signal to every busy slot, SIGTERM to
those still busy after `STOP_GRACE_S`, then SIGKILL to their process groups; a second Ctrl-C
moves on to the next signal at once. A slot's process remembers a Ctrl-C that arrives before its
job started and stops the job as it starts; a slot whose parent is SIGKILLed stops itself
(`stop_when_orphaned`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from minimind.foundations.processes import stop_when_orphaned

if TYPE_CHECKING:
    import multiprocessing.queues

STOP_GRACE_S = 20.0  # how long a stopped job may take to end its run before the next signal
WATCH_INTERVAL_S = 2.0  # how often `watch` is called while jobs run


@dataclass(frozen=True)
class Placement:
    """Where a slot's jobs run: a visible GPU (its `CUDA_VISIBLE_DEVICES` entry; None on the
    CPU) and the CPU threads of torch and of the processes a job starts (`OMP_NUM_THREADS`)."""

    gpu: str | None
    threads: int


T = TypeVar("T")


@dataclass(frozen=True)
class Job(Generic[T]):
    """One piece of work: `fn(*args)` in a slot's process, and what it returns. `fn`, `args` and
    the result cross a process boundary: a module-level function and picklable values."""

    name: str
    fn: Callable[..., T]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Unfinished:
    """The outcome of a job that did not return: its process died (`died`), or it raised."""

    reason: str
    died: bool = False


# A slot process's place, set once by `_start_slot` (the executor's initializer).
_placement: Placement | None = None


def current_placement() -> Placement:
    """In a job: the place of the slot running it."""
    assert _placement is not None, "called outside a job of run_in_slots"
    return _placement


_stop_requested = False  # in a slot's process: a stop arrived while no job ran


def _remember_stop(signum: int, frame: object) -> None:
    global _stop_requested
    _stop_requested = True


def _start_slot(
    placement: Placement, index: int, pids: multiprocessing.queues.Queue[tuple[int, int]]
) -> None:
    """In each slot's process, before any job (and torch) is imported: its own process group,
    a Ctrl-C remembered while idle, its place in the environment, its pid reported, then the
    signals the dispatcher blocked while it started this process."""
    global _placement
    os.setpgrp()
    signal.signal(signal.SIGINT, _remember_stop)
    _placement = placement
    os.environ["OMP_NUM_THREADS"] = str(placement.threads)
    if placement.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = placement.gpu
    stop_when_orphaned()
    pids.put((index, os.getpid()))
    pids.close()  # the one message: sent before any job runs, or a job killed at once takes it
    pids.join_thread()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)


def _run_job(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    """In a slot's process: `fn(*args)` with Ctrl-C raising `KeyboardInterrupt` while it runs
    (at once if one arrived before); the signal handlers it installs are put back after, for the
    slot's next job."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if _stop_requested:
            raise KeyboardInterrupt
        return fn(*args)
    finally:
        signal.signal(signal.SIGINT, _remember_stop)
        for sig, handler in saved.items():
            signal.signal(sig, handler)


# The stops the dispatcher holds back while it starts a slot's process, so that no stop lands
# between a process being started and the slot knowing of it.
_STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@dataclass
class _Slot:
    index: int
    placement: Placement
    executor: ProcessPoolExecutor | None = None
    pid: int | None = None  # of its current process, once it reported
    job: Job[Any] | None = None
    future: Future[Any] | None = field(default=None, repr=False)

    def submit(self, job: Job[Any], pids: multiprocessing.queues.Queue[tuple[int, int]]) -> None:
        if self.executor is None:
            self.executor = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),  # forking threads is unsafe
                initializer=_start_slot,
                initargs=(self.placement, self.index, pids),
            )
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        try:  # the process starts here: a stop waits until the slot holds its future
            self.job, self.future = job, self.executor.submit(_run_job, job.fn, job.args)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def lose_process(self) -> None:
        """Its process died: what it started goes with it, and the next job starts a new one."""
        assert self.executor is not None
        if self.pid is not None:
            _signal_group(self.pid, signal.SIGKILL)
        self.executor.shutdown(wait=False)
        self.executor, self.pid = None, None


def run_in_slots(
    jobs: Sequence[Job[T]],
    places: Sequence[Placement],
    replace_dead: Callable[[Job[T], int | None], Job[T] | None] | None = None,
    watch: Callable[[], None] | None = None,
) -> dict[str, T | Unfinished]:
    """Run `jobs` in order, `len(places)` at a time, one slot per place; what each job returned
    by name, in the order they started, `Unfinished` where it raised or its process died.
    `replace_dead(job, pid)` is told of each death and may return a job to run in its place.
    While jobs run, `watch` is called every `WATCH_INTERVAL_S`. An interruption of this process
    (or any error here) stops every job (`_stop`) and is raised again."""
    assert places or not jobs, "jobs need at least one slot"
    context = multiprocessing.get_context("spawn")
    pids: multiprocessing.queues.Queue[tuple[int, int]] = context.Queue()
    slots = [_Slot(index, placement) for index, placement in enumerate(places)]
    waiting = list(jobs)
    outcomes: dict[str, T | Unfinished] = {}
    started: list[str] = []
    try:
        while waiting or any(slot.job for slot in slots):
            for slot in slots:
                if slot.job is None and waiting:
                    job = waiting.pop(0)
                    slot.submit(job, pids)
                    started.append(job.name)
            busy = {slot.future: slot for slot in slots if slot.future is not None}
            done, _ = wait(busy, timeout=WATCH_INTERVAL_S, return_when=FIRST_COMPLETED)
            if watch is not None:
                watch()
            _note_pids(slots, pids)
            for future in done:
                slot = busy[future]
                ended = slot.job
                assert ended is not None
                slot.job, slot.future = None, None
                try:
                    outcomes[ended.name] = future.result()
                except BrokenProcessPool:
                    outcomes[ended.name] = Unfinished(f"its process (pid {slot.pid}) died", True)
                    pid = slot.pid
                    slot.lose_process()
                    replacement = replace_dead(ended, pid) if replace_dead else None
                    if replacement is not None:
                        waiting.insert(0, replacement)
                except BaseException as exc:  # raised by the job, in its process
                    outcomes[ended.name] = Unfinished(f"raised {type(exc).__name__}: {exc}")
    except BaseException as exc:
        _stop(slots, pids, getattr(exc, "signum", signal.SIGINT))
        raise
    finally:
        for slot in slots:
            if slot.executor is not None:
                slot.executor.shutdown(wait=True, cancel_futures=True)
    return {name: outcomes[name] for name in started}


def _note_pids(
    slots: list[_Slot], pids: multiprocessing.queues.Queue[tuple[int, int]], wait_s: float = 0.0
) -> None:
    """Take the pids the slots' new processes reported, waiting up to `wait_s` for the first."""
    with contextlib.suppress(queue.Empty):
        index, pid = pids.get(timeout=wait_s) if wait_s else pids.get_nowait()
        while True:
            slots[index].pid = pid
            index, pid = pids.get_nowait()


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _stop(
    slots: list[_Slot], pids: multiprocessing.queues.Queue[tuple[int, int]], signum: int
) -> None:
    """Stop every job after this process was interrupted: `signum` to each busy slot (Ctrl-C
    reaches only this process: the slots have their own process groups), time to end their
    runs, then SIGTERM, then SIGKILL to the process groups of every slot that was busy (what a
    job started outlives a slot that SIGTERM ended). A Ctrl-C while it waits moves on to the
    next signal at once."""
    for slot in slots:
        if slot.future is not None and slot.future.cancel():  # not started: never will be
            slot.job, slot.future = None, None
    stopping = [s for s in slots if s.future is not None]
    deadline = time.monotonic() + STOP_GRACE_S
    with contextlib.suppress(KeyboardInterrupt):
        while any(s.pid is None and not s.future.done() for s in stopping if s.future):
            if time.monotonic() >= deadline:
                break
            _note_pids(slots, pids, wait_s=0.1)  # a process still starting: its pid
    for step in (signum, signal.SIGTERM):
        busy = [s for s in stopping if s.future is not None and not s.future.done()]
        for slot in busy:
            if slot.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, step)
        with contextlib.suppress(KeyboardInterrupt):
            wait([s.future for s in busy if s.future is not None], timeout=STOP_GRACE_S)
    if any(s.future is not None and not s.future.done() for s in stopping):
        print("stopped jobs that did not end in time with SIGKILL", file=sys.stderr)
    for slot in stopping:
        if slot.pid is not None:
            _signal_group(slot.pid, signal.SIGKILL)
