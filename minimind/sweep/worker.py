"""Workers: processes that run trials of one study until it has its `trials` finished trials.

Every worker opens the storage, the tracker and the prepared data itself (a spawned process
shares nothing; a lone worker in the sweep's own process reuses the data the sweep prepared), and
loops: release the trials of dead workers, count, run one trial. It stops when the study has
`target` finished trials (COMPLETE + PRUNED), when `sweep.timeout` has passed, or after
`GIVE_UP_AFTER` failed trials of its own in a row (a spec that cannot train). While the finished
and running trials together reach the target it waits instead of stopping: a running trial of
another worker may still fail, or its worker die, and then a trial must take its place. Two
workers that check at the same moment can each start the last trial, so a study may end a
trial or two above `trials`, never below.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from minimind.data import PreparedData
from minimind.foundations.exit_codes import exit_code_for_signal
from minimind.foundations.processes import stop_when_orphaned
from minimind.foundations.redact import redact_log_records, redact_uncaught_exceptions
from minimind.foundations.verbosity import quiet_optuna
from minimind.spec import validate_spec
from minimind.sweep.algorithms import build_pruner, build_sampler, worker_seed
from minimind.sweep.liveness import release_orphans
from minimind.sweep.objective import TrialContext, TrialObjective
from minimind.sweep.optuna_study import open_study, progress
from minimind.sweep.storage import open_storage

POLL_S = 2.0
GIVE_UP_AFTER = 5
STOP_GRACE_S = 20.0
REPLACEMENTS_PER_WORKER = 3  # a worker that keeps dying (OOM) is not replaced forever


@dataclass(frozen=True)
class WorkerJob:
    """Everything a worker process needs, as plain data (it crosses a process boundary)."""

    spec_tree: dict[str, Any]  # the cell's spec: ablation applied, `sweep` kept
    variant: str
    study: str
    cell_hash: str  # of the cell's spec, which the study remembers
    plan_hash: str  # of the whole spec, for the children's `plan_hash` tag as in `run`
    parent_run_id: str
    target: int
    deadline: float | None  # time.time() after which no trial starts
    index: int = 0
    threads: int | None = None  # torch threads, so that N workers share the cores


def work(job: WorkerJob, data: Mapping[str, PreparedData] | None = None) -> str:
    """Run trials of `job.study` until it is done; returns why the worker stopped. `data`: data
    already prepared in this process, by `data` section (a spawned worker prepares its own)."""
    from minimind.tracking import Tracker

    if job.threads is not None:
        import torch

        torch.set_num_threads(job.threads)
    spec = validate_spec(job.spec_tree)
    sweep = spec.sweep_section()
    _quiet_optuna_once_interrupted()
    storage = open_storage(sweep)
    study = open_study(storage, job.study, sweep, job.cell_hash, pruner=build_pruner(sweep))
    seed = worker_seed(sweep.sampler.seed, job.index, len(study.get_trials(deepcopy=False)))
    study.sampler = build_sampler(sweep, seed)
    tracker = Tracker(spec.tracking.uri, spec.experiment)
    objective = TrialObjective(
        TrialContext(
            spec=spec,
            variant=job.variant,
            study=job.study,
            plan_hash=job.plan_hash,
            tracker=tracker,
            parent_run_id=job.parent_run_id,
            data=dict(data or {}),
        )
    )
    return run_trials(study, objective, job.target, job.deadline, sweep.retries)


def _quiet_optuna_once_interrupted() -> None:
    """Silence Optuna once this process gets Ctrl-C or SIGTERM: it would log the interrupted
    trial's traceback and failure, while the trial is FAIL, its run KILLED, and the sweep
    reports the interrupt in one line. The handlers in place are kept and called after."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread handles signals
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)
        if not callable(previous) or getattr(previous, "quiets_optuna", False):
            continue

        def handler(received: int, frame: Any, previous: Callable[..., Any] = previous) -> None:
            optuna.logging.set_verbosity(optuna.logging.ERROR)
            previous(received, frame)

        handler.quiets_optuna = True  # type: ignore[attr-defined]
        signal.signal(signum, handler)


def run_trials(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], Any],
    target: int,
    deadline: float | None,
    retries: int,
) -> str:
    """The worker loop (see the module docstring)."""
    failures_in_a_row = 0
    while True:
        release_orphans(study, retries)
        counts = progress(study)
        if counts.finished >= target:
            return "done"
        if deadline is not None and time.time() >= deadline:
            return "timeout"
        if failures_in_a_row >= GIVE_UP_AFTER:
            return f"gave up after {failures_in_a_row} failed trials in a row"
        if counts.finished + counts.running >= target:
            time.sleep(POLL_S)
            continue
        ended: list[FrozenTrial] = []
        try:
            study.optimize(
                objective,
                n_trials=1,
                catch=(Exception,),
                callbacks=[functools.partial(_record_ended, ended)],
            )
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError) as err:
            # Objective errors are caught above; this is Optuna's own bookkeeping, e.g. telling
            # a trial that another worker failed as stale (its heartbeat was lost under load).
            print(f"trial not recorded: {type(err).__name__}: {err}", file=sys.stderr)
            failures_in_a_row += 1
            continue
        failed = bool(ended) and ended[0].state == TrialState.FAIL
        failures_in_a_row = failures_in_a_row + 1 if failed else 0


def _record_ended(ended: list[FrozenTrial], _study: optuna.Study, trial: FrozenTrial) -> None:
    """An `optimize` callback: keeps the trial that ended."""
    ended.append(trial)


def worker_main(job: WorkerJob, spawned: bool = True) -> None:
    """Entry point of a spawned worker process (`spawned`) or of a Slurm job's; its exit code
    says how it ended. A job's worker stays in the job's process group and outlives the sweep
    that submitted it: Slurm signals and ends it."""
    from minimind.tracking import install_termination_handlers
    from minimind.training.allocator import keep_freed_memory

    if spawned and hasattr(os, "setpgid"):
        # A process group of its own: a terminal's Ctrl-C reaches the driver alone, which passes
        # one SIGINT on to each worker (`_stop`), as it does for a `kill -INT` of its pid.
        os.setpgid(0, 0)
    keep_freed_memory()  # a spawned process starts with glibc's defaults again
    redact_uncaught_exceptions()  # nor with the CLI's masking of credentials
    redact_log_records()
    quiet_optuna()  # a spawned process starts with Optuna's INFO level again
    install_termination_handlers()
    if spawned:
        stop_when_orphaned()  # a SIGKILLed driver leaves no worker training unattended
    try:
        reason = work(job)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the trial is FAIL, its run KILLED
        sys.exit(exit_code_for_signal(getattr(exc, "signum", signal.SIGINT)))
    print(f"worker {job.index} (pid {os.getpid()}): {reason}", flush=True)


WATCH_INTERVAL_S = 2.0
"""How often the driver looks at its spawned workers' study for its progress display."""


def run_workers(
    job: WorkerJob,
    n: int,
    data: Mapping[str, PreparedData] | None = None,
    watch: Callable[[], None] | None = None,
) -> list[int]:
    """Run `n` workers: in this process when `n` is 1 (reusing `data`, the prepared data by
    `data` section), else as spawned processes; their exit codes (negative: killed by that
    signal). While spawned workers run, `watch` is called every `WATCH_INTERVAL_S` (the
    driver's progress: the workers themselves show nothing). An interruption of this process
    stops them (they get the terminal's Ctrl-C themselves; SIGTERM is passed on) and is raised
    again."""
    if n == 1:
        work(job, data)
        return [0]
    threads = max(1, (os.cpu_count() or 1) // n)
    context = multiprocessing.get_context("spawn")  # forking a process with threads is unsafe

    def start(index: int) -> multiprocessing.process.BaseProcess:
        process = context.Process(
            target=worker_main,
            args=(replace(job, index=index, threads=threads),),
            name=f"sweep-worker-{index}",
        )
        process.start()
        return process

    processes = [start(i) for i in range(n)]
    try:
        _wait_all(processes, start, REPLACEMENTS_PER_WORKER * n, watch or (lambda: None))
    except KeyboardInterrupt as exc:
        _stop(processes, getattr(exc, "signum", None))
        raise
    exit_codes = []
    for i, process in enumerate(processes):
        code = process.exitcode
        assert code is not None, "_wait_all joined every worker"
        if code != 0:
            print(f"worker {i} (pid {process.pid}) {_describe_exit(code)}", flush=True)
        exit_codes.append(code)
    return exit_codes


def _wait_all(
    processes: list[multiprocessing.process.BaseProcess],
    start: Callable[[int], multiprocessing.process.BaseProcess],
    max_replacements: int,
    watch: Callable[[], None],
) -> None:
    """Join each worker as soon as it exits, so none lingers as a zombie that the others would
    take for a live worker of its trial. A worker killed by a signal (the OOM killer, a
    `kill`) is replaced, so that the study goes on with as many workers as asked for; the
    replacement finds the study done if it is. `processes` gets the replacements appended."""
    from multiprocessing.connection import wait

    pending = list(processes)
    while pending:
        wait([p.sentinel for p in pending], timeout=WATCH_INTERVAL_S)
        watch()
        for process in [p for p in pending if not p.is_alive()]:
            process.join()
            pending.remove(process)
            if process.exitcode is not None and process.exitcode < 0 and max_replacements > 0:
                max_replacements -= 1
                index = len(processes)
                print(
                    f"worker (pid {process.pid}) {_describe_exit(process.exitcode)}; "
                    f"starting worker {index} in its place",
                    flush=True,
                )
                processes.append(start(index))
                pending.append(processes[-1])


def _stop(processes: list[multiprocessing.process.BaseProcess], signum: int | None) -> None:
    """Stop the workers after this process was interrupted: pass the signal on (SIGINT for a
    Ctrl-C, which reaches only this process: the workers have their own process group), give
    them time to mark their trials and end their runs, then SIGTERM and kill what is left."""
    for process in processes:
        assert process.pid is not None  # every worker here was started
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGINT if signum is None else signum)
    for step in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + STOP_GRACE_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        alive = [p for p in processes if p.is_alive()]
        if not alive:
            return
        for process in alive:
            assert process.pid is not None  # alive, hence started
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, step)
    for process in processes:
        process.join()


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
