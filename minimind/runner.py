"""The `minimind run` command: every variant × seed of a spec, trained and logged to MLflow.

    exit_code = run_spec(load_spec("experiments/norm.yaml", ["train.steps=50"]), resume=False)

Order of work, so that a bad spec leaves nothing behind: plan (`minimind.plan`: every variant,
the devices, the tokenizer, every place a run writes), prepare the data (the only writes before MLflow: the token cache), then
open the tracker. The runs are those of `minimind.record`: one parent per invocation and one
child `<variant>/seed<k>` per run, each with the spec, a model summary, samples and a loss
figure as artifacts. A child that fails (non-finite loss, an exception) ends FAILED and the
others go on; Ctrl-C or SIGTERM end the current child and the parent KILLED. `--resume` reopens
the newest parent with the same `spec_hash`, skips its FINISHED children, continues the others
from their checkpoints and starts the missing ones.
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING

from minimind import distributed
from minimind.checkpoint import RunCheckpoint
from minimind.data import DataError, PreparedData
from minimind.device import autocast_dtype, resolve_device
from minimind.exit_codes import EXIT_FAILED, EXIT_OK, fail
from minimind.plan import Plan, data_key, describe_plan, plan_run, prepare_all
from minimind.record import (
    checkpoint_path,
    child_params,
    child_run_name,
    child_tags,
    component_labels,
    device_tags,
    parent_tags,
    process_tags,
)
from minimind.spec import Spec, SpecError, Variant, dump_spec, flatten
from minimind.train import Trainer, TrainOutcome

if TYPE_CHECKING:  # mlflow and matplotlib take seconds to import: not needed for spec errors
    from matplotlib.figure import Figure
    from mlflow.entities import Run

    from minimind.tracking import RunHandle, Tracker


def run_spec(spec: Spec, *, dry_run: bool = False, resume: bool = False) -> int:
    """The `minimind run` command on a loaded spec; returns its exit code."""
    try:
        plan = plan_run(spec)
    except SpecError as err:
        return fail(str(err))
    if dry_run:
        print(describe_plan(plan))
        if plan.spec.power is not None:
            from minimind.compare.render import power_hint

            print(power_hint(plan.spec.power, len(plan.variants), len(plan.spec.seeds)))
        return EXIT_OK
    try:
        with distributed.main_process_first():  # rank 0 fills the token cache, then the others
            data = prepare_all(plan)
    except (DataError, SpecError) as err:
        return fail(str(err))
    from minimind.tracking import run_until_stopped

    return run_until_stopped(lambda: execute(plan, data, resume), "continue with --resume")


def execute(plan: Plan, data: dict[str, PreparedData], resume: bool) -> int:
    """Train every run of `plan` under one parent run, then print the comparison."""
    from minimind.tracking import TrackingUnreachable
    from minimind.tracking.rank_zero import make_tracker

    spec = plan.spec
    try:
        tracker = make_tracker(spec.tracking.uri, spec.tracking.experiment)
    except TrackingUnreachable as err:
        return fail(str(err))
    parent, earlier = _open_parent(tracker, plan, resume)
    failed: list[str] = []
    with parent:
        for variant in plan.variants:
            for seed in spec.seeds:
                name = child_run_name(variant.name, seed)
                child = earlier.get(name)
                if child is not None and child.info.status == "FINISHED":
                    distributed.main_print(f"{name}: already FINISHED, skipped")
                    continue
                try:
                    outcome = run_child(tracker, parent, plan, variant, seed, data, child)
                except Exception:
                    traceback.print_exc()
                    failed.append(name)
                    distributed.main_print(f"{name}: FAILED (exception above)")
                    continue
                distributed.main_print(_one_line(name, outcome))
                if outcome.status != "FINISHED":
                    failed.append(name)
        if failed:
            parent.end("FAILED", f"{len(failed)} of {plan.n_runs} runs failed: {', '.join(failed)}")
    if distributed.is_main_process():
        _print_comparison_unless_unreachable(tracker.uri, spec.tracking.experiment, parent.run_id)
        print(f"\nbrowse the runs: mlflow ui --backend-store-uri {tracker.uri}")
    return EXIT_FAILED if failed else EXIT_OK


def _print_comparison_unless_unreachable(uri: str, experiment: str, parent_run_id: str) -> None:
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
        print(f"\ncomparison skipped: the tracking server {uri} did not answer ({first_line(exc)})")
        print(
            f"once it is back, import what was kept locally: minimind sync {DEFAULT_FALLBACK_DIR}/"
            f"\nthen compare: minimind compare {experiment} --tracking-uri {uri}"
        )


def _open_parent(tracker: Tracker, plan: Plan, resume: bool) -> tuple[RunHandle, dict[str, Run]]:
    """The parent run (new, or reopened with `resume`) and its earlier children by name."""
    spec = plan.spec
    for parent_id in tracker.close_dead_parents(parent_tags(plan.plan_hash)):
        distributed.main_print(
            f"closed parent run {parent_id} of a dead earlier invocation as KILLED"
        )
    if resume:
        found = tracker.find_parent(parent_tags(plan.plan_hash))
        if found is not None:
            parent_id = found.info.run_id
            # A SIGKILLed process left its runs RUNNING; end them so that an interruption of
            # this resume cannot leave one RUNNING. Each is reopened when its turn comes.
            tracker.fail_stale_runs(parent_id)
            children: dict[str, Run] = {}
            for run in tracker.children(parent_id):  # newest first
                children.setdefault(run.info.run_name, run)
            distributed.main_print(
                f"resuming parent run {parent_id} ({len(children)} earlier child runs)"
            )
            parent = tracker.resume_run(parent_id)
            parent.set_tags(process_tags())  # the process that owns it now
            return parent, children
        distributed.main_print(
            f"no earlier run of spec {spec.name} ({plan.plan_hash}) to resume; starting anew"
        )
    parent = tracker.start_parent(spec.name, {**parent_tags(plan.plan_hash), **process_tags()})
    parent.log_params(flatten(spec))
    parent.log_text(dump_spec(spec), "spec.yaml")
    return parent, {}


def run_child(
    tracker: Tracker,
    parent: RunHandle,
    plan: Plan,
    variant: Variant,
    seed: int,
    data: dict[str, PreparedData],
    earlier: Run | None,
) -> TrainOutcome:
    """Train one variant × seed in its child run (created, or reopened from `earlier`)."""
    spec = variant.spec
    model_cfg = spec.model_config_obj()
    name = child_run_name(variant.name, seed)
    path = checkpoint_path(
        spec.train.checkpoint_dir, plan.spec.tracking.experiment, plan.plan_hash, variant.name, seed
    )
    device = resolve_device(spec.train.device)
    amp_dtype = autocast_dtype(spec.train.precision, device, model_cfg.dim)
    if earlier is None:
        manifest = data[data_key(spec.data)].manifest_hash
        tags = child_tags(
            plan.plan_hash, variant.name, spec, seed, device, amp_dtype, data_manifest=manifest
        )
        handle = tracker.start_child(parent, name, child_params(spec, seed), tags)
    else:
        handle = tracker.resume_run(earlier.info.run_id)
    with handle:
        if earlier is not None:  # where it trains from now on
            handle.set_tags(device_tags(device, amp_dtype))
        trainer = Trainer(model_cfg, spec.train, data[data_key(spec.data)], seed, device)
        # The ids stamped on each save: a checkpoint of another invocation of the same spec,
        # at the same path, is not this run's.
        checkpoint = RunCheckpoint(path, {"parent": parent.run_id, "child": handle.run_id})
        # On the CPU: the RNG states must be CPU tensors, and load_state_dict moves the rest
        # to the device of the parameters (and the trainer's tensors) it is loaded into.
        state = checkpoint.load() if earlier is not None else None
        if state is not None:
            trainer.load_state_dict(state)
        if earlier is not None:
            distributed.main_print(
                f"{name}: resumed at step {trainer.step} from {path}"
                if trainer.step
                else f"{name}: no checkpoint of this run at {path}; restarting at step 0"
            )
        handle.log_text(dump_spec(spec), "spec.yaml")
        handle.log_text(model_summary(trainer), "model_summary.txt")
        outcome = trainer.fit(handle, checkpoint, label=name)
        if outcome.samples:
            handle.log_text(_samples_text(outcome), "samples.txt")
        handle.log_figure(loss_figure(name, outcome), "loss.png")
        if outcome.status != "FINISHED":
            handle.end(outcome.status, outcome.failure_reason)
    return outcome


def model_summary(trainer: Trainer) -> str:
    cfg, train = trainer.model_cfg, trainer.cfg
    lines = [
        f"parameters:        {cfg.num_params():,}",
        f"active parameters: {cfg.num_active_params():,}",
        f"FLOPs per token:   {cfg.flops_per_token(train.seq_len):.4g} (training, seq_len {train.seq_len})",
        f"tokens per step:   {train.tokens_per_step:,}",
        f"device:            {trainer.device} (autocast {trainer.amp_dtype or 'off'})",
        "components:        "
        + ", ".join(f"{slot}={label}" for slot, label in component_labels(cfg).items()),
        "",
        repr(trainer.model),
    ]
    return "\n".join(lines) + "\n"


def loss_figure(title: str, outcome: TrainOutcome) -> Figure:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), layout="constrained")
    ax = figure.add_subplot()
    for key, style in (("train/loss", "-"), ("val/loss", "o-")):
        points = outcome.history.get(key) or []
        if points:
            steps, values = zip(*points, strict=True)
            ax.plot(steps, values, style, label=key)
    ax.set(title=title, xlabel="step", ylabel="loss (nats/token)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return figure


def _samples_text(outcome: TrainOutcome) -> str:
    return (
        "\n\n".join(
            f"### prompt\n{s.prompt}\n### completion\n{s.completion}" for s in outcome.samples
        )
        + "\n"
    )


def _one_line(name: str, outcome: TrainOutcome) -> str:
    text = f"{name}: {outcome.status} at step {outcome.step} ({outcome.elapsed_s:.1f} s)"
    if outcome.val_bpb is not None:
        text += f", val/loss {outcome.val_loss:.4f}, val/bpb {outcome.val_bpb:.4f}"
    if outcome.failure_reason:
        text += f": {outcome.failure_reason}"
    return text
