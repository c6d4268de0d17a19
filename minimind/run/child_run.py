"""One variant × seed trained into one MLflow child run: the path `minimind run` and `minimind
sweep` (and `minimind study`, through them) share.

    outcome = train_child(ChildRun(tracker, parent_id, name, plan_hash, variant, spec, seed, data,
                                   checkpoint_path=path))

In order: resolve the device and its autocast dtype (`minimind.training.device.resolve_run_device`), start
the child run with `record.child_params` and `child_tags` (or reopen an earlier one, retagged
with the device it trains on now), build the `Trainer`, continue from the run's own checkpoint
when reopening, log the spec and a model summary, `fit`, log the samples and the loss figure.
A run that does not finish ends FAILED with its reason; an exception ends it FAILED (KILLED on
Ctrl-C) through its handle. What a sweep adds (its pruning sink, a trial's state tag and
objective values) comes in through `ChildHooks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from minimind.data import PreparedData
from minimind.record import (
    child_params,
    child_tags,
    component_labels,
    data_budget_params,
    device_tags,
)
from minimind.run.provenance import record_provenance
from minimind.spec import Spec, dump_spec, flatten
from minimind.training import distributed
from minimind.training.checkpoint import RunCheckpoint
from minimind.training.device import resolve_run_device
from minimind.training.optim import optimizer_flops_per_token
from minimind.training.trainer import CheckpointWriter, MetricSink, Trainer, TrainOutcome

if TYPE_CHECKING:  # mlflow and matplotlib take seconds to import
    from matplotlib.figure import Figure

    from minimind.tracking import RunHandle, Tracker
    from minimind.tracking.rank_zero import NullRunHandle, RankZeroTracker


class ForkState(Protocol):
    """The state a budget branch starts from (`minimind.run.branches.ForkFile`)."""

    def load(self) -> dict[str, Any]: ...


@dataclass
class ChildRun:
    """What names and trains one child run: its tracker and parent, its name, the whole spec's
    hash (`plan_hash` tag), its ablation cell, its resolved spec, its seed and its data.

    `earlier_run_id` reopens that run instead of starting one (`minimind run --resume`), and
    continues from `checkpoint_path` when the checkpoint there is this run's. Without a
    `checkpoint_path` nothing is saved: a sweep's trial is never resumed (Optuna retries a trial
    as a new one).
    """

    tracker: Tracker | RankZeroTracker
    parent_run_id: str
    name: str
    plan_hash: str
    variant: str
    spec: Spec
    seed: int
    data: PreparedData
    tags: Mapping[str, Any] = field(default_factory=dict)  # besides `child_tags`: a trial's
    earlier_run_id: str | None = None
    # Budget branches (`minimind.run.branches`): the trunk saves the state at each fork step;
    # a shorter budget's run starts from its fork's state (when not resumed past it).
    forks: Mapping[int, CheckpointWriter] = field(default_factory=dict)
    start: ForkState | None = None
    checkpoint_path: Path | None = None


class ChildHooks:
    """What a caller adds to the path; the defaults are `minimind run`'s (the run itself is the
    metric sink, nothing else). A sweep's objective overrides them."""

    def started(self, run: RunHandle | NullRunHandle) -> None:
        """The run exists (started or reopened), before anything trains."""

    def sink(self, run: RunHandle | NullRunHandle) -> MetricSink:
        """Where the trainer logs its metrics."""
        return run

    def interrupted(self, run: RunHandle | NullRunHandle, exc: BaseException) -> None:
        """Training raised `exc` (re-raised after this; the handle ends the run FAILED, or
        KILLED on Ctrl-C, unless this ended it)."""

    def ended(self, run: RunHandle | NullRunHandle, outcome: TrainOutcome) -> None:
        """Training returned `outcome`, before the run ends (FAILED with its reason when the
        outcome did not finish)."""


def train_child(child: ChildRun, hooks: ChildHooks | None = None) -> TrainOutcome:
    """Train `child` in its MLflow run and end the run; the outcome."""
    hooks = hooks or ChildHooks()
    spec, name = child.spec, child.name
    model_cfg = spec.model_config_obj()
    run_device = resolve_run_device(spec.train, model_cfg.dim)
    if child.earlier_run_id is None:
        tags = child_tags(
            child.plan_hash,
            child.variant,
            model_cfg,
            child.seed,
            run_device,
            data_manifest=child.data.manifest_hash,
        )
        params = child_params(
            flatten(spec),
            model_cfg,
            spec.train.seq_len,
            child.seed,
            optimizer_flops_per_token(model_cfg, spec.train),
        )
        steps = spec.train.planned_steps
        planned = None if steps is None else steps * spec.train.tokens_per_step
        params.update(data_budget_params(planned, len(child.data.train_tokens)))
        run = child.tracker.start_child(child.parent_run_id, name, params, {**tags, **child.tags})
    else:
        run = child.tracker.resume_run(child.earlier_run_id)
    hooks.started(run)
    with run:
        try:
            if child.earlier_run_id is not None:  # where it trains from now on
                run.set_tags(device_tags(run_device))
            record_provenance(run, run_device.device)
            trainer = Trainer(model_cfg, spec.train, child.data, child.seed, run_device)
            checkpoint = _continue_from_checkpoint(child, run, trainer)
            if child.start is not None and trainer.step == 0:
                trainer.start_branch(child.start.load())
            run.log_text(dump_spec(spec), "spec.yaml")
            run.log_text(model_summary(trainer), "model_summary.txt")
            outcome = trainer.fit(hooks.sink(run), checkpoint, label=name, forks=child.forks)
            if outcome.samples:
                run.log_text(_samples_text(outcome), "samples.txt")
            run.log_figure(loss_figure(name, outcome), "loss.png")
        except BaseException as exc:
            hooks.interrupted(run, exc)
            raise
        hooks.ended(run, outcome)
        if outcome.status != "FINISHED":
            run.end(outcome.status, outcome.failure_reason)
    return outcome


def _continue_from_checkpoint(
    child: ChildRun, run: RunHandle | NullRunHandle, trainer: Trainer
) -> RunCheckpoint | None:
    """The run's checkpoint (None without a path); a reopened run continues from it when it is
    this run's (stamped with its id: another invocation of the same spec writes the same path)."""
    if child.checkpoint_path is None:
        return None
    owner = {"parent": child.parent_run_id, "child": run.run_id}
    checkpoint = RunCheckpoint(child.checkpoint_path, owner)
    if child.earlier_run_id is None:
        return checkpoint
    # On the CPU: the RNG states must be CPU tensors, and load_state_dict moves the rest to the
    # device of the parameters (and the trainer's tensors) it is loaded into.
    found = checkpoint.load()
    if found is not None:
        trainer.load_state_dict(found[0])
    distributed.main_print(  # the file loaded: last.prev.pt when last.pt was damaged
        f"{child.name}: resumed at step {trainer.step} from {found[1] if found else child.checkpoint_path}"
        if trainer.step
        else f"{child.name}: no checkpoint of this run at {checkpoint.file}; restarting at step 0"
    )
    return checkpoint


def model_summary(trainer: Trainer) -> str:
    model_cfg, train_cfg = trainer.model_cfg, trainer.cfg
    flops = model_cfg.flops_per_token(train_cfg.seq_len)
    lines = [
        f"parameters:        {model_cfg.num_params():,}",
        f"active parameters: {model_cfg.num_active_params():,}",
        f"FLOPs per token:   {flops:.4g} (training, seq_len {train_cfg.seq_len})",
        f"tokens per step:   {train_cfg.tokens_per_step:,}",
        f"device:            {trainer.device} (autocast {trainer.amp_dtype or 'off'})",
        "components:        "
        + ", ".join(f"{slot}={label}" for slot, label in component_labels(model_cfg).items()),
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
