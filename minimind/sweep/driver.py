"""`minimind sweep`: every study of a spec, run by local workers, summarized and exported.

Order of work, so that bad input stops everything before a trial runs: check the spec, the
options and the storage; open (or create) every study and check it matches the spec; prepare the
data once; then per study open its MLflow parent run, run the workers, and write and log the
report. `best.yaml` is written at the end. Re-running the same command tops each study up to
`sweep.trials` finished trials. Ctrl-C (or SIGTERM) fails the running trials in Optuna, ends
their runs and the parent KILLED, and leaves nothing RUNNING.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import optuna

from minimind.data import PreparedData
from minimind.foundations.errors import MinimindError, fail_with
from minimind.foundations.exit_codes import EXIT_FAILED, EXIT_OK, fail
from minimind.foundations.paths import REPORTS_DIR
from minimind.foundations.progress import Display, display
from minimind.foundations.verbosity import quiet_optuna
from minimind.run.plan import prepare_all
from minimind.spec import SpecError, SweepConfig
from minimind.sweep.best import best_trial, describe_front, write_best
from minimind.sweep.liveness import release_orphans
from minimind.sweep.optuna_study import Progress, counted, open_parent, open_study, progress
from minimind.sweep.plan import StudyCell, SweepPlan, describe_sweep, plan_sweep, target_trials
from minimind.sweep.report import StudyReport, describe, log_report, write_report
from minimind.sweep.space import edge_warnings
from minimind.sweep.storage import open_storage
from minimind.sweep.worker import WorkerJob, run_workers

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from minimind.tracking import Tracker


def run_sweep(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    workers: int | None = None,
    trials: int | None = None,
    tracking_uri: str | None = None,
    best: bool = False,
    dry_run: bool = False,
    reports_dir: Path = REPORTS_DIR,
) -> int:
    """The `minimind sweep` command (`best`: only print the best trials and write best.yaml;
    `dry_run`: only print what it would run, opening no storage); returns its exit code."""
    quiet_optuna()
    try:
        plan = plan_sweep(
            path, overrides, workers=workers, trials=trials, tracking_uri=tracking_uri
        )
        if dry_run:
            print(describe_sweep(plan))
            return EXIT_OK
        if not best and plan.spec.launcher.name == "slurm":
            _check_slurm_launch(plan)  # before the storage is opened: nothing written
        storage = open_storage(plan.sweep, create=not best)
        studies = [
            open_study(storage, cell.name, cell.sweep, cell.cell_hash, create=not best)
            for cell in plan.cells
        ]
    except SpecError as err:
        return fail(str(err))
    except KeyError as err:  # --best before the study exists
        return fail(f"{err.args[0]}; run `minimind sweep {path}` first")
    if best:
        return show_best(plan, studies, reports_dir)
    try:
        data = prepare_all(plan.run_plan)
    except MinimindError as err:
        return fail_with(err)
    from minimind.tracking import run_until_stopped

    try:
        return run_until_stopped(
            lambda: _sweep_all(plan, studies, data, reports_dir), "run the same command to resume"
        )
    except SpecError as err:  # sbatch refused the worker jobs (`launcher`)
        return fail(str(err))


def _check_slurm_launch(plan: SweepPlan) -> None:
    """The worker jobs need submitit, and stores every node reaches; a `SpecError` if not."""
    from minimind.run.cluster import slurm

    slurm.require_submitit()
    spec = plan.spec
    for field, uri in (("tracking.uri", spec.tracking.uri), ("sweep.storage", plan.sweep.storage)):
        if problem := slurm.shared_store_problem(uri, spec.launcher):
            raise SpecError(field, problem)


def _sweep_all(
    plan: SweepPlan,
    studies: list[optuna.Study],
    data: dict[str, PreparedData],
    reports_dir: Path,
) -> int:
    from minimind.tracking import Tracker, TrackingUnreachable

    spec = plan.spec
    try:
        tracker = Tracker(spec.tracking.uri, spec.experiment)
    except TrackingUnreachable as err:
        return fail(str(err))
    ok = True
    best: dict[str, FrozenTrial] = {}
    for cell, study in zip(plan.cells, studies, strict=True):
        reached, report = _sweep_study(plan, cell, study, tracker, data, reports_dir)
        ok = reached and ok
        if report.best is not None:
            best[cell.name] = report.best
    if best:
        path = write_best(plan, best, reports_dir)
        print(f"wrote {path}: minimind run {path}")
    return EXIT_OK if ok else EXIT_FAILED


def _sweep_study(
    plan: SweepPlan,
    cell: StudyCell,
    study: optuna.Study,
    tracker: Tracker,
    data: dict[str, PreparedData],
    reports_dir: Path,
) -> tuple[bool, StudyReport]:
    """Top one study up to its target: whether it got there (or ran out of time), and its
    report. `data`, the prepared data by `data` section, serves a worker in this process."""
    sweep = cell.sweep
    target = target_trials(sweep)
    release_orphans(study, sweep.retries)  # trials of an earlier invocation's dead workers
    before = progress(study)
    remaining = target - counted(study, sweep)
    workers = max(1, min(sweep.workers, remaining))
    deadline = time.time() + sweep.timeout if sweep.timeout is not None else None
    with open_parent(tracker, study, cell, plan.run_plan.plan_hash) as parent:
        if remaining > 0:
            print(
                f"study {cell.name}: {before}; running {remaining} more (target {target}) with "
                f"{workers} worker(s)",
                flush=True,
            )
            job = WorkerJob(
                spec_tree=cell.spec.tree(),
                variant=cell.variant.name,
                study=cell.name,
                cell_hash=cell.cell_hash,
                plan_hash=plan.run_plan.plan_hash,
                parent_run_id=parent.run_id,
                target=target,
                deadline=deadline,
            )
            try:
                if plan.spec.launcher.name == "slurm":
                    from minimind.sweep.slurm_workers import run_worker_jobs

                    for line in run_worker_jobs(job, workers, plan.spec.launcher):
                        print(f"study {cell.name}: {line}", flush=True)
                else:
                    with display(f"study {cell.name}", target, target - remaining) as shown:
                        watch = _watcher(study, cell, shown)
                        run_workers(job, workers, data=data, watch=watch)
            except KeyboardInterrupt:
                # The workers have exited: whatever they left RUNNING is failed, not retried.
                release_orphans(study, retries=0, exited=(os.getpid(),))
                raise
        else:
            print(f"study {cell.name}: {before}; the target of {target} is reached", flush=True)
        release_orphans(study, sweep.retries)
        report = write_report(study, sweep, reports_dir / cell.name)
        log_report(parent, report)
        print(_describe(report, study, sweep), flush=True)
        done = counted(study, sweep)
        timed_out = deadline is not None and time.time() >= deadline
        if done < target and not timed_out:
            parent.end("FAILED", f"{done} of {target} trials finished")
            return False, report
    return True, report


def _watcher(study: optuna.Study, cell: StudyCell, shown: Display) -> Callable[[], None]:
    """A look at the study's trials for `run_workers`: a report each time the counts change (a
    bar on a terminal, a line elsewhere)."""
    last: list[Progress] = []

    def watch() -> None:
        now = progress(study)
        if last and now == last[0]:
            return
        last[:] = [now]
        shown.report(counted(study, cell.sweep), status=str(now), line=f"study {cell.name}: {now}")

    return watch


def show_best(plan: SweepPlan, studies: list[optuna.Study], reports_dir: Path) -> int:
    """`--best`: print each study's best trial(s) and write best.yaml; 1 if none has one."""
    best: dict[str, FrozenTrial] = {}
    for cell, study in zip(plan.cells, studies, strict=True):
        sweep = cell.sweep
        trial = best_trial(study, sweep)
        report = StudyReport(cell.name, progress(study), trial, sweep.metrics)
        print(_describe(report, study, sweep))
        if trial is not None:
            best[cell.name] = trial
    if not best:
        return fail("no study has a complete trial yet", EXIT_FAILED)
    path = write_best(plan, best, reports_dir)
    print(f"wrote {path}: minimind run {path}")
    # The best trial scored well on these seeds partly by luck: scored on them again, the tuned
    # values look better than they are (docs/statistics.md, "Seed hygiene for tuned arms").
    tuning = sorted({s for c in plan.cells for s in plan.spec.seeds[: c.sweep.seeds_per_trial]})
    print(
        f"note: the sweep chose its values on seeds {tuning}, which best.yaml runs too: evaluate "
        "it on others (-o 'seeds=[...]'); a study lists them as tuning_seeds"
    )
    return EXIT_OK


def _describe(report: StudyReport, study: optuna.Study, sweep: SweepConfig) -> str:
    text = describe(report)
    if sweep.is_multi_objective and report.best is not None:
        text += "\n" + describe_front(study, sweep)
    if report.best is not None:
        text += "".join(
            f"\n  warning: {w}" for w in edge_warnings(sweep.params, report.best.params)
        )
    return text
