"""Work run N at a time on this host: the one mechanism behind `minimind run --jobs`, a sweep's
local workers and a study's streams.

    codes = run_in_slots([Job("a", train, (spec, "a")), ...], [Placement(None, 1)] * 2)

Each slot is a spawned process with a place (a visible GPU, its CPU threads) that runs jobs one
after another, each the call `fn(*args)`. A slot is a one-worker
`ProcessPoolExecutor`, not a worker of one shared pool: when a worker of a shared pool dies
(`kill -9`, the OOM killer), the executor marks the pool broken and terminates every other
worker with it, while here a dead worker costs its own job alone, and its slot starts a new
process for the next one.

Every slot's process has its own process group, so that a terminal's Ctrl-C reaches only this
process, which passes the stop on once (`_stop`): the signal to every busy slot, SIGTERM to
those still busy after `STOP_GRACE_S`, then SIGKILL to their process groups (a job's own child
processes included). Idle slots ignore Ctrl-C; a slot whose parent is SIGKILLed stops itself
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


class Died:
    """The outcome of a job whose process died before the job returned."""

    def __repr__(self) -> str:
        return "DIED"


DIED = Died()

# A slot process's place, set once by `_start_slot` (the executor's initializer).
_placement: Placement | None = None


def current_placement() -> Placement:
    """In a job: the place of the slot running it."""
    assert _placement is not None, "called outside a job of run_in_slots"
    return _placement


def _start_slot(
    placement: Placement, index: int, pids: multiprocessing.queues.Queue[tuple[int, int]]
) -> None:
    """In each slot's process, before any job (and torch) is imported: its own process group,
    Ctrl-C ignored while idle, its place in the environment, its pid reported."""
    global _placement
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _placement = placement
    os.environ["OMP_NUM_THREADS"] = str(placement.threads)
    if placement.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = placement.gpu
    stop_when_orphaned()
    pids.put((index, os.getpid()))
    pids.close()  # the one message: sent before any job runs, or a job killed at once takes it
    pids.join_thread()


def _run_job(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    """In a slot's process: `fn(*args)` with Ctrl-C raising `KeyboardInterrupt` while it runs;
    the signal handlers it installs are put back after, for the slot's next job."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return fn(*args)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for sig, handler in saved.items():
            signal.signal(sig, handler)


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
        self.job, self.future = job, self.executor.submit(_run_job, job.fn, job.args)

    def lose_process(self) -> None:
        """Its process died: the next job starts a new one."""
        assert self.executor is not None
        self.executor.shutdown(wait=False)
        self.executor, self.pid = None, None


def run_in_slots(
    jobs: Sequence[Job[T]],
    places: Sequence[Placement],
    replace_dead: Callable[[Job[T], int | None], Job[T] | None] | None = None,
    watch: Callable[[], None] | None = None,
) -> dict[str, T | Died]:
    """Run `jobs` in order, `len(places)` at a time, one slot per place; what each job returned
    by name, in the order they started, `DIED` where its process died before it returned.
    `replace_dead(job, pid)` is told of each death and may return a job to run in its place.
    While jobs run, `watch` is called every `WATCH_INTERVAL_S`. An interruption of this process
    stops every job (`_stop`) and is raised again."""
    context = multiprocessing.get_context("spawn")
    pids: multiprocessing.queues.Queue[tuple[int, int]] = context.Queue()
    slots = [_Slot(index, placement) for index, placement in enumerate(places)]
    waiting = list(jobs)
    outcomes: dict[str, T | Died] = {}
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
                    outcomes[ended.name] = DIED
                    pid = slot.pid
                    slot.lose_process()
                    replacement = replace_dead(ended, pid) if replace_dead else None
                    if replacement is not None:
                        waiting.insert(0, replacement)
    except KeyboardInterrupt as exc:
        _stop(slots, pids, getattr(exc, "signum", signal.SIGINT))
        raise
    finally:
        for slot in slots:
            if slot.executor is not None:
                slot.executor.shutdown(wait=True, cancel_futures=True)
    return {name: outcomes[name] for name in started}


def _note_pids(slots: list[_Slot], pids: multiprocessing.queues.Queue[tuple[int, int]]) -> None:
    """Take the pids the slots' new processes reported."""
    with contextlib.suppress(queue.Empty):
        while True:
            index, pid = pids.get_nowait()
            slots[index].pid = pid


def _stop(
    slots: list[_Slot], pids: multiprocessing.queues.Queue[tuple[int, int]], signum: int
) -> None:
    """Stop every job after this process was interrupted: `signum` to each busy slot (Ctrl-C
    reaches only this process: the slots have their own process groups), time to end their
    runs, then SIGTERM, then SIGKILL to their process groups."""
    for slot in slots:
        if slot.future is not None and slot.future.cancel():  # not started: never will be
            slot.job, slot.future = None, None
    deadline = time.monotonic() + STOP_GRACE_S
    starting = [s for s in slots if s.future is not None and s.pid is None]
    while any(s.pid is None for s in starting) and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):  # a process still starting: wait for its pid
            index, pid = pids.get(timeout=0.1)
            slots[index].pid = pid
    for step in (signum, signal.SIGTERM, signal.SIGKILL):
        busy = [s for s in slots if s.future is not None and not s.future.done()]
        if not busy:
            return
        for slot in busy:
            if slot.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    if step == signal.SIGKILL:
                        os.killpg(slot.pid, step)
                    else:
                        os.kill(slot.pid, step)
        if step != signal.SIGKILL:
            wait([s.future for s in busy if s.future is not None], timeout=STOP_GRACE_S)
    print("stopped jobs that did not end in time with SIGKILL", file=sys.stderr)
