"""`minimind run --jobs N`: the variants × seeds of one invocation trained by N processes here.

    exit_code = run_jobs(plan, resume=False)   # plan.spec.launcher.jobs > 1

One parent run, opened here as a serial run opens it; each child `<variant>/seed<k>` trained as
a job of `foundations.job_slots` by the one-child path a Slurm job takes
(`runner.train_in_job`), so a run is recorded exactly as a serial run records it. Each of the
`launcher.jobs` slots has its place (`place`): a GPU of the visible ones, round-robin,
`jobs_per_gpu` to a GPU, and its share of the CPU threads.

Stops, as for serial runs: Ctrl-C or SIGTERM here is passed on to every job, which ends its run
KILLED; the parent ends KILLED and the command exits 130 with one line. A job whose process dies
(kill -9, the OOM killer) costs its own run alone: its run is ended KILLED here at once, the
others train on, and `--resume` continues it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from minimind.foundations.errors import MinimindError, fail_with
from minimind.foundations.exit_codes import EXIT_FAILED, EXIT_OK, fail
from minimind.foundations.job_slots import Job, Placement, current_placement, run_in_slots
from minimind.foundations.redact import redact
from minimind.record import child_run_name
from minimind.run.branches import budget_variants
from minimind.spec import Spec, SpecError
from minimind.spec.launcher import LauncherConfig

if TYPE_CHECKING:
    from minimind.run.plan import Plan
    from minimind.tracking import Tracker

DIED_REASON = "its job process died while the run was RUNNING"


def place(slot: int, launcher: LauncherConfig, gpus: Sequence[str], cores: int) -> Placement:
    """The place of worker `slot` (0 ≤ slot < `launcher.jobs`) among the visible `gpus` (none on
    a CPU-only host or for `train.device: cpu`) and the host's `cores`: GPUs round-robin, so that
    N jobs spread over the GPUs before doubling up; threads `threads_per_job`, or an equal share
    of the cores."""
    jobs = launcher.jobs
    threads = launcher.threads_per_job or max(1, cores // jobs)
    gpu = gpus[slot % len(gpus)] if gpus else None
    return Placement(gpu, threads)


def check_placement(launcher: LauncherConfig, gpus: Sequence[str]) -> None:
    """Raise `SpecError` when `launcher.jobs` would put more than `jobs_per_gpu` jobs on a GPU."""
    if gpus and launcher.jobs > len(gpus) * launcher.jobs_per_gpu:
        raise SpecError(
            "launcher.jobs",
            f"{launcher.jobs} jobs do not fit {len(gpus)} GPU(s) at "
            f"launcher.jobs_per_gpu={launcher.jobs_per_gpu}; raise jobs_per_gpu or lower jobs",
        )


def visible_gpus(spec: Spec) -> list[str]:
    """The GPUs the jobs may use: the visible CUDA devices, none when the runs train on the CPU."""
    import torch

    if spec.train.device not in ("auto", "cuda") or not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    return [str(index) for index in range(torch.cuda.device_count())]


def _train_job(spec: Spec, only: tuple[str, ...], parent_run_id: str, name: str) -> int:
    """In a job: train run `name` under `parent_run_id` as a Slurm job would (with budget
    branches, every budget of its variant and seed, in order); its exit code."""
    import torch

    from minimind.run.plan import plan_run, prepare_all
    from minimind.run.runner import JobTarget, train_in_job
    from minimind.tracking import run_until_stopped

    torch.set_num_threads(current_placement().threads)
    plan = plan_run(spec, only=only)
    data = prepare_all(plan)  # filled by the parent: read back
    return run_until_stopped(
        lambda: train_in_job(plan, data, JobTarget(parent_run_id, name)), "", announce=False
    )


def run_jobs(plan: Plan, resume: bool, restart: bool = False, only: Sequence[str] = ()) -> int:
    """Train `plan`'s runs in `plan.spec.launcher.jobs` processes under one parent run, then
    print the comparison; its exit code (`restart`: as `runner.execute`'s). Interrupted,
    re-raises once every job has stopped."""
    from minimind.run.runner import open_parent, print_comparison_unless_unreachable, runs_by_name
    from minimind.tracking import Tracker, TrackingUnreachable

    spec, launcher = plan.spec, plan.spec.launcher
    gpus = visible_gpus(spec)
    try:
        check_placement(launcher, gpus)
    except SpecError as err:
        return fail(str(err))
    try:
        tracker = Tracker(spec.tracking.uri, spec.experiment)
    except TrackingUnreachable as err:
        return fail(str(err))
    try:
        parent, earlier = open_parent(tracker, plan, resume, restart=restart)
    except MinimindError as err:
        return fail_with(err)
    cores = os.cpu_count() or 1
    places = [place(slot, launcher, gpus, cores) for slot in range(launcher.jobs)]
    with parent:
        todo: dict[str, list[str]] = {}  # a job: one run, or every budget of a branched one
        for name, (variant, seed) in runs_by_name(plan).items():
            names = [child_run_name(v.name, seed) for v in budget_variants(variant)]
            if all(n in earlier and earlier[n].info.status == "FINISHED" for n in names):
                print("\n".join(f"{n}: already FINISHED, skipped" for n in names))
            else:
                todo[name] = names
        runs = sum(map(len, todo.values()))
        print(f"training {runs} run(s) in {launcher.jobs} jobs", flush=True)
        jobs = [Job(name, _train_job, (spec, tuple(only), parent.run_id, name)) for name in todo]

        def end_its_runs(dead: Job[int], _pid: int | None) -> None:
            _end_orphans(tracker, parent.run_id, todo[dead.name])  # now, not after the others

        try:
            outcomes = run_in_slots(jobs, places, end_its_runs)
        finally:
            _end_orphans(tracker, parent.run_id)
        failed = [name for name, outcome in outcomes.items() if outcome != EXIT_OK]
        if failed:
            parent.end("FAILED", f"{len(failed)} of {plan.n_runs} runs failed: {', '.join(failed)}")
    print_comparison_unless_unreachable(tracker.uri, spec.experiment, parent.run_id)
    print(redact(f"\nbrowse the runs: mlflow ui --backend-store-uri {tracker.uri}"))
    return EXIT_FAILED if failed else EXIT_OK


def _end_orphans(tracker: Tracker, parent_run_id: str, names: Sequence[str] | None = None) -> None:
    """End KILLED every child (of `names`, default all) still RUNNING: its job's process died
    (kill -9, the OOM killer) before it could end its run."""
    for run in tracker.children(parent_run_id, ["RUNNING"]):
        if names is None or run.info.run_name in names:
            tracker.end_run(run.info.run_id, "KILLED", DIED_REASON)
