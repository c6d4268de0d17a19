"""`minimind run --launcher slurm`: every variant × seed a Slurm job, under one parent run.

    exit_code = submit_spec(load_spec("experiments/norm.yaml", ["launcher.name=slurm"]))

The submitting command plans and prepares the data as `minimind run` does (so a bad spec is
answered here, and the jobs find the token cache filled), opens the parent run, writes the
resolved spec beside the jobs' logs (named by the parent and the spec's text, so that two
`--resume` invocations with other seeds each keep their own), submits the runs not yet FINISHED
as one job array (each
task `minimind run <spec> --parent-run <id> --only <variant>/seed<k>`, under torchrun with
`--nproc`), waits for them and reports: each run that did not finish with its job id, the
job's last state and its log. When `sbatch` refuses the array, a parent run opened by this
invocation is deleted with its spec file: only a submission that succeeded leaves one. It may exit (Ctrl-C, a lost login) while the jobs train: `--resume`
reopens the newest parent of the spec, waits for the jobs still queued or running (the ledger
keeps their ids), resubmits the others that did not finish (each continues from its checkpoint)
and never trains a FINISHED run again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from minimind.foundations.atomic_file import atomic_write_text
from minimind.foundations.errors import MinimindError, fail_with
from minimind.foundations.exit_codes import EXIT_FAILED, EXIT_OK, fail
from minimind.foundations.redact import redact
from minimind.record import FAILURE_REASON_TAG, plan_hash_lookups
from minimind.run.branches import budgets
from minimind.run.cluster import slurm
from minimind.run.cluster.job import MinimindJob
from minimind.run.cluster.slurm import GONE
from minimind.run.plan import Plan, describe_plan, plan_run, prepare_all
from minimind.run.runner import runs_by_name
from minimind.spec import Spec, SpecError, dump_spec

if TYPE_CHECKING:  # mlflow takes seconds to import: not needed for spec errors
    from mlflow.entities import Run

    from minimind.tracking import Tracker


def job_argv(spec_file: Path, parent_run_id: str, name: str, nproc: int) -> list[str]:
    """The `minimind` command a job runs to train `name`."""
    argv = ["run", str(spec_file), f"--parent-run={parent_run_id}", f"--only={name}"]
    return argv + ([f"--nproc={nproc}"] if nproc > 1 else [])


def write_job_spec(folder: str, parent_run_id: str, spec: Spec) -> Path:
    """The resolved spec the jobs of `parent_run_id` read, written under `folder`; its name has
    the text's hash, so invocations that resume one parent with other seeds never share one."""
    text = dump_spec(spec)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(folder).resolve() / "specs" / f"{parent_run_id}-{digest}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path


def submit_spec(
    spec: Spec,
    *,
    dry_run: bool = False,
    resume: bool = False,
    nproc: int = 1,
    only: Sequence[str] = (),
) -> int:
    """`minimind run` with `launcher.name: slurm` (`only`: the variants to train, all when
    empty); returns its exit code."""
    try:
        plan = plan_run(spec, world_size=nproc, only=only)
    except SpecError as err:
        return fail(str(err))
    if any(budgets(v.spec.train) for v in plan.variants):  # a job trains one run, not a trunk's
        return fail("train.schedule.branches: budget branches train on this host only, not as Slurm jobs yet")  # fmt: skip
    if dry_run:
        print(describe_plan(plan))
        print(slurm.describe_jobs(plan.spec.launcher, list(runs_by_name(plan)), nproc))
        return EXIT_OK
    try:
        slurm.require_submitit()
        if problem := slurm.shared_store_problem(spec.tracking.uri, spec.launcher):
            return fail(f"tracking.uri: {problem}")
    except SpecError as err:
        return fail(str(err))
    from minimind.tracking.backend import reachability_problem

    if problem := reachability_problem(spec.tracking.uri):
        return fail(f"tracking.uri: {problem}")
    try:
        prepare_all(plan)  # here, once: the jobs then find every token cache filled
    except MinimindError as err:
        return fail_with(err)
    from minimind.tracking import run_until_stopped

    return run_until_stopped(
        lambda: _submit_and_collect(plan, resume, nproc),
        "the jobs go on; collect them with --resume",
    )


def _submit_and_collect(plan: Plan, resume: bool, nproc: int) -> int:
    from minimind.run.runner import open_parent, print_comparison_unless_unreachable
    from minimind.tracking import Tracker, TrackingUnreachable

    spec, launcher = plan.spec, plan.spec.launcher
    try:
        tracker = Tracker(spec.tracking.uri, spec.experiment)
    except TrackingUnreachable as err:
        return fail(str(err))
    lookups = plan_hash_lookups(plan.plan_hash)
    reopens = resume and any(tracker.find_parent(tags) for tags in lookups)
    parent, earlier = open_parent(tracker, plan, resume, by_jobs=True)
    with parent:
        spec_file = write_job_spec(launcher.folder, parent.run_id, spec)
        ledger = slurm.Ledger.open(launcher.folder, parent.run_id)
        todo = [
            n
            for n in runs_by_name(plan)
            if n not in earlier or earlier[n].info.status != "FINISHED"
        ]
        for name in sorted(set(runs_by_name(plan)) - set(todo)):
            print(f"{name}: already FINISHED, skipped")
        live = ledger.live(todo)
        for name, job_id in live.items():
            print(f"{name}: job {job_id} of an earlier invocation is still queued or running")
        work = [
            (name, MinimindJob(job_argv(spec_file, parent.run_id, name, nproc)))
            for name in todo
            if name not in live
        ]
        try:
            submitted = slurm.submit(launcher, spec.name, work)
        except SpecError as err:
            parent.end("FAILED", str(err))
            if not reopens:  # nothing was submitted under the parent this invocation made
                tracker.delete_run(parent.run_id)
                spec_file.unlink()
            return fail(str(err))
        ledger.record(submitted)
        for name, job_id in submitted.items():
            print(f"{name}: submitted as job {job_id} ({slurm.resources(launcher, nproc)})")
        jobs = {**live, **submitted}
        names_of = {job_id: name for name, job_id in jobs.items()}
        print(f"waiting for {len(jobs)} job(s); logs under {launcher.folder}", flush=True)
        states = slurm.wait(
            jobs.values(),
            lambda job_id, state: print(
                f"{names_of[job_id]}: job {job_id} ended ({state})", flush=True
            ),
        )
        failed = _report_failures(tracker, plan, parent.run_id, jobs, states)
        if failed:
            parent.end(
                "FAILED", f"{len(failed)} of {plan.n_runs} runs did not finish: {', '.join(failed)}"
            )
    print_comparison_unless_unreachable(tracker.uri, spec.experiment, parent.run_id)
    print(redact(f"\nbrowse the runs: mlflow ui --backend-store-uri {tracker.uri}"))
    return EXIT_FAILED if failed else EXIT_OK


def _report_failures(
    tracker: Tracker, plan: Plan, parent_run_id: str, jobs: dict[str, str], states: dict[str, str]
) -> list[str]:
    """Print each job whose run did not finish (its job id, last state and log); their names.

    A run still RUNNING after its job ended was left so by a process that could not end it (an
    OOM kill, the time limit's SIGKILL, a lost node): no job trains it any more, so it is ended
    KILLED here, as a local invocation's stale runs are; `--resume` continues it."""
    newest: dict[str, Run] = {}
    for child in tracker.children(parent_run_id):  # newest first
        newest.setdefault(child.info.run_name, child)
    # as on disk now: a later `--resume` may have given a run another job, which trains it
    ledger = slurm.Ledger.open(plan.spec.launcher.folder, parent_run_id)
    failed = []
    for name, job_id in jobs.items():
        run = newest.get(name)
        if run is not None and run.info.status == "FINISHED":
            continue
        failed.append(name)
        state = states.get(job_id, GONE)
        status = "never started" if run is None else f"run {run.info.status}"
        reason = None if run is None else run.data.tags.get(FAILURE_REASON_TAG)
        if run is not None and run.info.status == "RUNNING" and ledger.jobs.get(name) == job_id:
            reason = f"its Slurm job {job_id} ended {state} while the run was RUNNING"
            tracker.end_run(run.info.run_id, "KILLED", reason)
            status = "run KILLED"
        print(
            f"{name}: job {job_id} ended {state}, {status}"
            + (f" ({reason})" if reason else "")
            + f"; log: {slurm.log_path(plan.spec.launcher, job_id)}"
        )
    return failed
