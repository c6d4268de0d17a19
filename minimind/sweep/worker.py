"""Workers: processes that run trials of one study until it has its `trials` finished trials.

Every worker opens the storage, the tracker and the prepared data itself (a spawned process
shares nothing; a lone worker in the sweep's own process reuses the data the sweep prepared), and
loops: release the trials of dead workers, count, run one trial. It stops when the study has
`target` finished trials (COMPLETE + PRUNED; on a grid its points answered,
`optuna_study.counted`), when `sweep.timeout` has passed, or after
`GIVE_UP_AFTER` failed trials of its own in a row (a spec that cannot train). While the finished
and running trials together reach the target it waits instead of stopping: a running trial of
another worker may still fail, or its worker die, and then a trial must take its place. Two
workers that check at the same moment can each start the last trial, so a study may end a
trial or two above `trials`, never below.
"""

from __future__ import annotations

import functools
import itertools
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
from minimind.foundations.job_slots import Job, Placement, Unfinished, run_in_slots
from minimind.foundations.redact import redact_log_records, redact_uncaught_exceptions
from minimind.foundations.verbosity import quiet_optuna
from minimind.spec import validate_spec
from minimind.sweep.algorithms import build_pruner, build_sampler, worker_seed
from minimind.sweep.liveness import release_orphans
from minimind.sweep.objective import TrialContext, TrialObjective
from minimind.sweep.optuna_study import counted, open_study, progress
from minimind.sweep.storage import open_storage

POLL_S = 2.0
GIVE_UP_AFTER = 5
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
    count = functools.partial(counted, sweep=sweep)
    return run_trials(study, objective, job.target, job.deadline, sweep.retries, count)


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
    count: Callable[[optuna.Study], int] = lambda study: progress(study).finished,
) -> str:
    """The worker loop (see the module docstring); `count`, the trials that count toward
    `target` (`optuna_study.counted`)."""
    failures_in_a_row = 0
    while True:
        release_orphans(study, retries)
        done = count(study)
        if done >= target:
            return "done"
        if deadline is not None and time.time() >= deadline:
            return "timeout"
        if failures_in_a_row >= GIVE_UP_AFTER:
            return f"gave up after {failures_in_a_row} failed trials in a row"
        if done + progress(study).running >= target:
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


def worker_main(job: WorkerJob) -> int:
    """Entry point of a worker: a job of `run_in_slots` or a Slurm job's (which stays in the
    job's process group and outlives the sweep that submitted it: Slurm signals and ends it);
    its exit code says how it ended."""
    from minimind.tracking import install_termination_handlers
    from minimind.training.allocator import keep_freed_memory

    keep_freed_memory()  # a spawned process starts with glibc's defaults again
    redact_uncaught_exceptions()  # nor with the CLI's masking of credentials
    redact_log_records()
    quiet_optuna()  # a spawned process starts with Optuna's INFO level again
    install_termination_handlers()
    try:
        reason = work(job)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the trial is FAIL, its run KILLED
        return exit_code_for_signal(getattr(exc, "signum", signal.SIGINT))
    print(f"worker {job.index} (pid {os.getpid()}): {reason}", flush=True)
    return 0


def run_workers(
    job: WorkerJob,
    n: int,
    data: Mapping[str, PreparedData] | None = None,
    watch: Callable[[], None] | None = None,
) -> list[int | Unfinished]:
    """Run `n` workers: in this process when `n` is 1 (reusing `data`, the prepared data by
    `data` section), else as jobs of `run_in_slots` with an equal share of the cores; their exit
    codes (`Unfinished` where one raised or its process died). A worker whose process dies (the OOM killer, a `kill`) is
    replaced, up to `REPLACEMENTS_PER_WORKER` times per worker, so that the study goes on with
    as many workers as asked for; the replacement finds the study done if it is. While they
    run, `watch` is called every `job_slots.WATCH_INTERVAL_S` (the driver's progress: the workers
    themselves show nothing). An interruption of this process stops them and is raised again."""
    if n == 1:
        work(job, data)
        return [0]
    threads = max(1, (os.cpu_count() or 1) // n)
    started = itertools.count()

    def worker(index: int) -> Job[int]:
        return Job(f"worker {index}", worker_main, (replace(job, index=index, threads=threads),))

    replacements = REPLACEMENTS_PER_WORKER * n

    def replace_dead(dead: Job[int], pid: int | None) -> Job[int] | None:
        nonlocal replacements
        if replacements == 0:
            return None
        replacements -= 1
        index = n + next(started)
        print(f"{dead.name} (pid {pid}) died; starting worker {index} in its place", flush=True)
        return worker(index)

    outcomes = run_in_slots(
        [worker(i) for i in range(n)], [Placement(None, threads)] * n, replace_dead, watch
    )
    for name, code in outcomes.items():
        if code != 0:
            print(f"{name} {_describe_exit(code)}", flush=True)
    return list(outcomes.values())


def _describe_exit(code: int | Unfinished) -> str:
    return code.reason if isinstance(code, Unfinished) else f"exited with code {code}"
