"""The `minimind run` command: every variant × seed of a spec, trained and logged to MLflow.

    exit_code = run_spec(load_spec("experiments/norm.yaml", ["train.steps=50"]), resume=False)

Order of work, so that a bad spec leaves nothing behind: plan (`minimind.run.plan`: every variant,
the devices, the tokenizer, every place a run writes), prepare the data (the only writes before MLflow: the token cache), then
open the tracker. The runs are those of `minimind.record`: one parent per invocation and one
child `<variant>/seed<k>` per run, each trained by `minimind.run.child_run` (the path a sweep's
trials take too) with the spec, a model summary, samples and a loss figure as artifacts. A child that fails (non-finite loss, an exception) ends FAILED and the
others go on; Ctrl-C or SIGTERM end the current child and the parent KILLED. `--resume` reopens
the newest parent with the same `plan_hash`, skips its FINISHED children, continues the others
from their checkpoints and starts the missing ones. An interrupted (RUNNING or KILLED) child whose
checkpoint is not here (trained on another machine, removed, or never written) is refused
before anything trains, when it logged metrics: continued at step 0 in its own run, its curve
would repeat; `--restart` trains it in a new run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minimind.data import PreparedData
from minimind.foundations.errors import MinimindError, fail_with
from minimind.foundations.exit_codes import EXIT_FAILED, EXIT_OK, fail
from minimind.foundations.redact import print_exception, redact
from minimind.record import (
    checkpoint_path,
    child_run_name,
    ladder_tags,
    parent_tags,
    plan_hash_lookups,
    process_tags,
    slurm_job_tags,
)
from minimind.run.branches import ForkFile, budgets, train_branches
from minimind.run.child_run import ChildRun, train_child
from minimind.run.cluster.takeover import refuse_live_jobs
from minimind.run.plan import Plan, check_memory, data_key, describe_plan, plan_run, prepare_all
from minimind.spec import Spec, SpecError, Variant, dump_spec, flatten
from minimind.training import distributed
from minimind.training.checkpoint import CheckpointError
from minimind.training.trainer import TrainOutcome

if TYPE_CHECKING:  # mlflow takes seconds to import: not needed for spec errors
    from mlflow.entities import Run

    from minimind.tracking import RunHandle, Tracker
    from minimind.tracking.rank_zero import NullRunHandle, RankZeroTracker


@dataclass(frozen=True)
class JobTarget:
    """The one child a job trains (`<variant>/seed<k>`) under a parent run its submitter made."""

    parent_run_id: str
    name: str


def run_spec(
    spec: Spec,
    *,
    dry_run: bool = False,
    resume: bool = False,
    restart: bool = False,
    only: Sequence[str] = (),
    job: JobTarget | None = None,
    execute_with: Callable[[Plan, dict[str, PreparedData], bool, bool], int] | None = None,
) -> int:
    """The `minimind run` command on a loaded spec (`only`: the variants to train, all when
    empty); returns its exit code. With `job`, train that one child only (a Slurm job of
    `minimind.run.slurm_run`): finished, it is skipped; begun, it continues from its checkpoint.
    `execute_with`: what trains the runs in place of `execute` (`minimind.run.jobs`)."""
    try:
        plan = plan_run(spec, only=only)
    except SpecError as err:
        return fail(str(err))
    if job is not None and job.name not in (runs := runs_by_name(plan)):
        return fail(f"--only: no run {job.name} in spec {spec.name}; runs: {', '.join(runs)}")
    if dry_run:
        print(describe_plan(plan))
        if plan.spec.power is not None:
            from minimind.compare.render import power_hint

            print(power_hint(plan.spec.power, len(plan.variants), len(plan.spec.seeds)))
        return EXIT_OK
    try:
        check_memory(plan)
    except SpecError as err:
        return fail(str(err))
    from minimind.tracking.backend import reachability_problem

    problem = reachability_problem(spec.tracking.uri)  # a stopped server: before tokenizing
    if problem is not None:
        return fail(f"tracking.uri: {problem}")
    try:
        with distributed.main_process_first():  # rank 0 fills the token cache, then the others
            data = prepare_all(plan)
    except MinimindError as err:
        return fail_with(err)
    from minimind.tracking import run_until_stopped

    if job is not None:
        return run_until_stopped(
            lambda: train_in_job(plan, data, job),
            "the job ended",
            announce=distributed.is_main_process(),  # one line, not one per rank
        )
    return run_until_stopped(
        lambda: (execute_with or execute)(plan, data, resume, restart),
        "continue with --resume",
        announce=distributed.is_main_process(),
    )


def execute(plan: Plan, data: dict[str, PreparedData], resume: bool, restart: bool = False) -> int:
    """Train every run of `plan` under one parent run, then print the comparison (`restart`:
    interrupted runs without their checkpoint train anew in new runs)."""
    from minimind.tracking import TrackingUnreachable
    from minimind.tracking.rank_zero import make_tracker

    spec = plan.spec
    experiment = spec.experiment
    try:
        tracker = make_tracker(spec.tracking.uri, experiment)
    except TrackingUnreachable as err:
        return fail(str(err))
    try:
        parent, earlier = open_parent(tracker, plan, resume, restart=restart)
    except MinimindError as err:
        return fail(str(err))
    failed: list[str] = []
    with parent:
        for variant in plan.variants:
            for seed in spec.seeds:
                name = child_run_name(variant.name, seed)
                try:
                    failed += train_variant_seed(
                        tracker, parent.run_id, plan, variant, seed, data, earlier
                    )
                except CheckpointError as exc:  # both files damaged: the user decides
                    parent.end("FAILED", f"{name}: {exc}")
                    return fail(f"{name}: {exc}")
        if failed:
            parent.end("FAILED", f"{len(failed)} of {plan.n_runs} runs failed: {', '.join(failed)}")
    if distributed.is_main_process():
        print_comparison_unless_unreachable(tracker.uri, experiment, parent.run_id)
        print(redact(f"\nbrowse the runs: mlflow ui --backend-store-uri {tracker.uri}"))
    return EXIT_FAILED if failed else EXIT_OK


def train_variant_seed(
    tracker: Tracker | RankZeroTracker,
    parent_run_id: str,
    plan: Plan,
    variant: Variant,
    seed: int,
    data: dict[str, PreparedData],
    earlier: dict[str, Run],
    tags: dict[str, str] | None = None,
) -> list[str]:
    """Train `variant` × `seed` under the parent, each run skipped when `earlier` (the parent's
    children by name) has it FINISHED: one run, or with budget branches every budget, the
    shorter ones forked from the trunk (`branches.train_branches`); `tags` go on every run. The
    names of the runs that did not finish."""
    if not budgets(variant.spec.train):
        trained = _train_one(tracker, parent_run_id, plan, variant, seed, data, earlier, tags=tags)
        return [] if trained else [child_run_name(variant.name, seed)]

    def train_one(
        v: Variant, branch: dict[str, str], forks: dict[int, ForkFile], start: ForkFile | None
    ) -> bool:
        args = (tracker, parent_run_id, plan, v, seed, data, earlier)
        return _train_one(*args, tags={**(tags or {}), **branch}, forks=forks, start=start)

    def done(v: Variant) -> bool:
        child = earlier.get(child_run_name(v.name, seed))
        return child is not None and child.info.status == "FINISHED"

    args = (variant, seed, variant.spec, plan.spec.experiment, plan.plan_hash)
    return [child_run_name(name, seed) for name in train_branches(*args, train_one, done)]


def _train_one(
    tracker: Tracker | RankZeroTracker,
    parent_run_id: str,
    plan: Plan,
    variant: Variant,
    seed: int,
    data: dict[str, PreparedData],
    earlier: dict[str, Run],
    **branch: Any,
) -> bool:
    """Train one child (skipped when an earlier invocation finished it; `branch`: `run_child`'s
    budget-branch arguments); whether it finished. An exception is printed, not raised: the
    other runs go on."""
    name = child_run_name(variant.name, seed)
    child = earlier.get(name)
    if child is not None and child.info.status == "FINISHED":
        distributed.main_print(f"{name}: already FINISHED, skipped")
        return True
    try:
        outcome = run_child(tracker, parent_run_id, plan, variant, seed, data, child, **branch)
    except CheckpointError:  # both files damaged: not one run's failure, the user decides
        raise
    except Exception as exc:
        print_exception(exc)
        distributed.main_print(f"{name}: FAILED (exception above)")
        return False
    distributed.main_print(_one_line(name, outcome))
    return outcome.status == "FINISHED"


def runs_by_name(plan: Plan) -> dict[str, tuple[Variant, int]]:
    """Each run of the plan by its child run name, variant-major (the order runs train in)."""
    return {
        child_run_name(v.name, seed): (v, seed) for v in plan.variants for seed in plan.spec.seeds
    }


def train_in_job(plan: Plan, data: dict[str, PreparedData], job: JobTarget) -> int:
    """Train `job.name` under its parent (with budget branches, every budget of its variant and
    seed): skipped when a child of that name FINISHED, continued from its checkpoint when one
    began (a requeued or resubmitted job), started otherwise."""
    from minimind.tracking import TrackingUnreachable
    from minimind.tracking.rank_zero import make_tracker

    variant, seed = runs_by_name(plan)[job.name]  # checked by `run_spec`
    experiment = plan.spec.experiment
    try:
        tracker = make_tracker(plan.spec.tracking.uri, experiment)
    except TrackingUnreachable as err:
        return fail(str(err))
    earlier: dict[str, Run] = {}
    for run in tracker.children(job.parent_run_id):  # newest first: each name's newest
        earlier.setdefault(run.info.run_name, run)
    args = (tracker, job.parent_run_id, plan, variant, seed, data, earlier, slurm_job_tags())
    return EXIT_FAILED if train_variant_seed(*args) else EXIT_OK


def print_comparison_unless_unreachable(uri: str, experiment: str, parent_run_id: str) -> None:
    """The invocation's comparison; a tracking server gone by now does not fail a run that
    trained and kept its records (sent, or in the fallback file): the comparison is skipped."""
    from minimind.compare import print_comparison
    from minimind.tracking.retry import first_line, is_transient
    from minimind.tracking.run import DEFAULT_FALLBACK_DIR

    try:
        print_comparison(uri, experiment, parent_run_id)
    except Exception as exc:
        if not is_transient(exc):
            raise
        print(
            redact(
                f"\ncomparison skipped: the tracking server {uri} did not answer "
                f"({first_line(exc)})"
            )
        )
        print(
            f"once it is back, import what was kept locally: minimind sync {DEFAULT_FALLBACK_DIR}/"
            + redact(f"\nthen compare: minimind compare {experiment} --tracking-uri {uri}")
        )


def open_parent(
    tracker: Tracker | RankZeroTracker,
    plan: Plan,
    resume: bool,
    *,
    by_jobs: bool = False,
    restart: bool = False,
) -> tuple[RunHandle | NullRunHandle, dict[str, Run]]:
    """The parent run (new, or reopened with `resume`) and its earlier children by name; a
    `SpecError` (`--resume`), before the parent is reopened, for an interrupted child without
    its checkpoint here, unless `restart` (then it is left out: it trains anew in a new run).

    `by_jobs`: the children train in Slurm jobs, not in this process. The parent then carries no
    process tags (this process may exit while its jobs train: the parent is not stale when it
    does) and a reopened parent's RUNNING children are left alone (a job may be training them).
    """
    spec = plan.spec
    # Every dead invocation of the experiment, whatever its spec: none else would ever close it.
    for parent_id in tracker.close_dead_parents():
        distributed.main_print(
            f"closed parent run {parent_id} of a dead earlier invocation as KILLED"
        )
    if resume:
        lookups = plan_hash_lookups(plan.plan_hash)
        found = next(filter(None, (tracker.find_parent(tags) for tags in lookups)), None)
        if found is not None:
            parent_id = found.info.run_id
            if not by_jobs:
                # Its runs trained by live Slurm jobs are theirs, not this process's.
                running = tracker.children(parent_id, ["RUNNING"])
                distributed.main_answer(
                    lambda: refuse_live_jobs(spec.launcher.folder, parent_id, running)
                )
                # A SIGKILLed process left its runs RUNNING; end them so that an interruption of
                # this resume cannot leave one RUNNING. Each is reopened when its turn comes.
                tracker.fail_stale_runs(parent_id)
            children: dict[str, Run] = {}
            for run in tracker.children(parent_id):  # newest first
                children.setdefault(run.info.run_name, run)
            if not by_jobs:  # a job's checkpoint is on the cluster's filesystem, not here
                for name in _interrupted_without_checkpoint(plan, children, restart):
                    del children[name]
            distributed.main_print(
                f"resuming parent run {parent_id} ({len(children)} earlier child runs)"
            )
            parent = tracker.resume_run(parent_id)
            if not by_jobs:
                parent.set_tags(process_tags())  # the process that owns it now
            return parent, children
        distributed.main_print(
            f"no earlier run of spec {spec.name} ({plan.plan_hash}) to resume; starting anew"
        )
    owner = {} if by_jobs else process_tags()
    parent = tracker.start_parent(spec.name, {**parent_tags(plan.plan_hash), **owner})
    parent.log_params(flatten(spec))
    parent.log_text(dump_spec(spec), "spec.yaml")
    return parent, {}


def _interrupted_without_checkpoint(
    plan: Plan, children: dict[str, Run], restart: bool
) -> list[str]:
    """The names of the RUNNING or KILLED children that logged metrics but whose own checkpoint
    is not on this machine (to train anew when `restart`); else a `SpecError` naming the first.
    A child that logged nothing has no curve to repeat: it restarts in its run."""
    from minimind.training.checkpoint import RunCheckpoint

    experiment = plan.spec.experiment
    missing = []
    for name, (variant, seed) in runs_by_name(plan).items():
        run = children.get(name)
        if run is None or run.info.status not in ("RUNNING", "KILLED") or not run.data.metrics:
            continue
        path = checkpoint_path(
            variant.spec.train.checkpoint_dir, experiment, plan.plan_hash, variant.name, seed
        )
        try:
            if RunCheckpoint(path, {"child": run.info.run_id}).load() is not None:
                continue
        except CheckpointError:  # here, but damaged: its turn to train names it (`execute`)
            continue
        if not restart:
            raise SpecError(
                "--resume",
                f"{name} is {run.info.status} and its checkpoint is not at {path} (trained on "
                "another machine, or removed): continued, its run would repeat its curve from "
                "step 0; copy the checkpoint here, or add --restart to train it anew in a new run",
            )
        missing.append(name)
    return missing


def run_child(
    tracker: Tracker | RankZeroTracker,
    parent_run_id: str,
    plan: Plan,
    variant: Variant,
    seed: int,
    data: dict[str, PreparedData],
    earlier: Run | None,
    tags: dict[str, str] | None = None,
    forks: Mapping[int, ForkFile] | None = None,
    start: ForkFile | None = None,
) -> TrainOutcome:
    """Train one variant × seed in its child run (created with `tags` besides its own, or
    reopened from `earlier`); a budget branch's trunk saves `forks`, a shorter budget's run
    begins from `start` (`minimind.run.branches`)."""
    spec = variant.spec
    experiment = plan.spec.experiment
    path = checkpoint_path(
        spec.train.checkpoint_dir, experiment, plan.plan_hash, variant.name, seed
    )
    child = ChildRun(
        tracker,
        parent_run_id,
        child_run_name(variant.name, seed),
        plan.plan_hash,
        variant.name,
        spec,
        seed,
        data[data_key(spec.data)],
        tags={**ladder_tags(variant.rung, variant.arm), **(tags or {})},
        earlier_run_id=earlier.info.run_id if earlier is not None else None,
        checkpoint_path=path,
        forks=dict(forks or {}),
        start=start,
    )
    return train_child(child)


def _one_line(name: str, outcome: TrainOutcome) -> str:
    text = f"{name}: {outcome.status} at step {outcome.step} ({outcome.elapsed_s:.1f} s)"
    if outcome.val_bpb is not None:
        text += f", val/loss {outcome.val_loss:.4f}, val/bpb {outcome.val_bpb:.4f}"
    if outcome.failure_reason:
        text += f": {outcome.failure_reason}"
    return text
