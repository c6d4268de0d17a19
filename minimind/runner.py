"""One `minimind run` invocation: every variant × seed of a spec, logged to MLflow.

    exit_code = run_spec("experiments/norm.yaml", ["train.steps=50"], resume=False)

Order of work, so that a bad spec leaves nothing behind: load and validate the spec (every
variant, the devices), then prepare the data (the only writes before MLflow: the token cache),
then open the tracker. Runs: one parent per invocation (tag `minimind.role=parent`, `spec_hash`)
and one child `<variant>/seed<k>` per run, with the flattened resolved spec as params. A child
that fails (non-finite loss, an exception) ends FAILED and the others go on; Ctrl-C or SIGTERM
end the current child and the parent KILLED. `--resume` reopens the newest parent with the same
`spec_hash`, skips its FINISHED children, continues the others from their checkpoints and starts
the missing ones.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minimind import distributed
from minimind.checkpoint import load_checkpoint
from minimind.data import DataConfig, DataError, PreparedData, prepare_data
from minimind.exit_codes import EXIT_FAILED, EXIT_OK, fail
from minimind.record import (
    checkpoint_path,
    child_params,
    child_run_name,
    child_tags,
    component_labels,
    device_tags,
    parent_tags,
)
from minimind.spec import Spec, SpecError, Variant, dump_spec, expand, flatten, load_spec, spec_hash
from minimind.train import Trainer, TrainOutcome, autocast_dtype, planned_steps, resolve_device

if TYPE_CHECKING:  # mlflow and matplotlib take seconds to import: not needed for spec errors
    from matplotlib.figure import Figure
    from mlflow.entities import Run

    from minimind.tracking import RunHandle, Tracker


@dataclass(frozen=True)
class Plan:
    """A validated spec and what it expands to."""

    spec: Spec
    variants: list[Variant]
    spec_hash: str

    @property
    def n_runs(self) -> int:
        return len(self.variants) * len(self.spec.seeds)


def plan_run(
    path: str | Path, overrides: Sequence[str] = (), world_size: int | None = None
) -> Plan:
    """Load, validate and expand a spec for `world_size` ranks (default: this process group's);
    raises `SpecError`. Writes nothing."""
    spec = load_spec(path, overrides)
    variants = expand(spec)
    for variant in variants:
        try:
            resolve_device(variant.spec.train.device)
        except ValueError as err:
            raise SpecError("train.device", str(err)) from None
        try:
            distributed.local_batch_size(variant.spec.train.batch_size, world_size)
        except ValueError as err:
            raise SpecError("train.batch_size", str(err)) from None
    return Plan(spec, variants, spec_hash(spec))


def run_spec(
    path: str | Path, overrides: Sequence[str] = (), *, dry_run: bool = False, resume: bool = False
) -> int:
    """The `minimind run` command; returns its exit code."""
    try:
        plan = plan_run(path, overrides)
    except SpecError as err:
        return fail(str(err))
    if dry_run:
        print(describe_plan(plan))
        return EXIT_OK
    try:
        with distributed.main_process_first():  # rank 0 fills the token cache, then the others
            data = prepare_all(plan)
    except (DataError, SpecError) as err:
        return fail(str(err))
    from minimind.tracking import run_until_stopped

    return run_until_stopped(lambda: execute(plan, data, resume), "continue with --resume")


def prepare_all(plan: Plan) -> dict[str, PreparedData]:
    """Tokenized data per distinct `data` section (keyed by its JSON), checked against each
    variant's vocabulary and context length; raises `DataError` or `SpecError`."""
    data: dict[str, PreparedData] = {}
    for variant in plan.variants:
        key = data_key(variant.spec.data)
        if key not in data:
            data[key] = prepare_data(variant.spec.data)
        prepared, vocab = data[key], variant.spec.model_config_obj().vocab_size
        if prepared.vocab_size > vocab:
            raise SpecError(
                "model.vocab_size",
                f"must be >= the tokenizer's {prepared.vocab_size} tokens, got {vocab}",
            )
        shortest = min(len(prepared.train_tokens), len(prepared.val_tokens))
        if variant.spec.train.seq_len > shortest:
            raise SpecError(
                "train.seq_len",
                f"must be <= the {shortest} tokens of the corpus's smaller split, "
                f"got {variant.spec.train.seq_len}",
            )
    return data


def execute(plan: Plan, data: dict[str, PreparedData], resume: bool) -> int:
    """Train every run of `plan` under one parent run, then print the comparison."""
    from minimind.compare import print_comparison

    spec = plan.spec
    tracker = distributed.make_tracker(spec.tracking.uri, spec.tracking.experiment)
    parent, earlier = _open_parent(tracker, plan, resume)
    failed: list[str] = []
    with parent:
        for variant in plan.variants:
            for seed in spec.seeds:
                name = child_run_name(variant.name, seed)
                child = earlier.get(name)
                if child is not None and child.info.status == "FINISHED":
                    print(f"{name}: already FINISHED, skipped")
                    continue
                try:
                    outcome = run_child(tracker, parent, plan, variant, seed, data, child)
                except Exception:
                    traceback.print_exc()
                    failed.append(name)
                    print(f"{name}: FAILED (exception above)")
                    continue
                print(_one_line(name, outcome))
                if outcome.status != "FINISHED":
                    failed.append(name)
        if failed:
            parent.end("FAILED", f"{len(failed)} of {plan.n_runs} runs failed: {', '.join(failed)}")
    if distributed.is_main_process():
        print_comparison(tracker.uri, spec.tracking.experiment, parent.run_id)
        print(f"\nbrowse the runs: mlflow ui --backend-store-uri {tracker.uri}")
    return EXIT_FAILED if failed else EXIT_OK


def _open_parent(tracker: Tracker, plan: Plan, resume: bool) -> tuple[RunHandle, dict[str, Run]]:
    """The parent run (new, or reopened with `resume`) and its earlier children by name."""
    spec = plan.spec
    if resume:
        found = tracker.find_parent(parent_tags(plan.spec_hash))
        if found is not None:
            parent_id = found.info.run_id
            # A SIGKILLed process left its runs RUNNING; end them so that an interruption of
            # this resume cannot leave one RUNNING. Each is reopened when its turn comes.
            tracker.fail_stale_runs(parent_id)
            children: dict[str, Run] = {}
            for run in tracker.children(parent_id):  # newest first
                children.setdefault(run.info.run_name, run)
            print(f"resuming parent run {parent_id} ({len(children)} earlier child runs)")
            return tracker.resume_run(parent_id), children
        print(f"no earlier run of spec {spec.name} ({plan.spec_hash}) to resume; starting anew")
    parent = tracker.start_parent(spec.name, parent_tags(plan.spec_hash))
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
        spec.train.checkpoint_dir, plan.spec.tracking.experiment, plan.spec_hash, variant.name, seed
    )
    device = resolve_device(spec.train.device)
    amp_dtype = autocast_dtype(spec.train.precision, device)
    if earlier is None:
        tags = child_tags(plan.spec_hash, variant.name, spec, seed, device, amp_dtype)
        handle = tracker.start_child(parent, name, child_params(spec, seed), tags)
    else:
        handle = tracker.resume_run(earlier.info.run_id)
    with handle:
        if earlier is not None:  # where it trains from now on
            handle.set_tags(device_tags(device, amp_dtype))
        trainer = Trainer(model_cfg, spec.train, data[data_key(spec.data)], seed)
        if earlier is not None and path.is_file():
            # On the CPU: the RNG states must be CPU tensors, and load_state_dict moves the rest
            # to the device of the parameters (and the trainer's tensors) it is loaded into.
            state = load_checkpoint(path)
            # A checkpoint of another invocation of the same spec is not this run's.
            if state["run_ids"].get("child") == handle.run_id:
                trainer.load_state_dict(state)
        handle.log_text(dump_spec(spec), "spec.yaml")
        handle.log_text(model_summary(trainer), "model_summary.txt")
        run_ids = {"parent": parent.run_id, "child": handle.run_id}
        outcome = trainer.fit(handle, path, run_ids, label=name)
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


def describe_plan(plan: Plan) -> str:
    """The `--dry-run` table: variants with parameter and FLOP counts and tokens per run."""
    spec = plan.spec
    headers = ["variant", "params", "active", "FLOPs/token", "steps", "tokens/run"]
    rows = []
    for variant in plan.variants:
        cfg, train = variant.spec.model_config_obj(), variant.spec.train
        steps = planned_steps(train)
        budget = [] if train.time_limit is None else [f"<= {train.time_limit:g} s"]
        rows.append(
            [
                variant.name,
                f"{cfg.num_params():,}",
                f"{cfg.num_active_params():,}",
                f"{cfg.flops_per_token(train.seq_len):.3g}",
                " ".join([f"{steps:,}" if steps else "-", *budget]),
                f"{steps * train.tokens_per_step:,}" if steps else "-",
            ]
        )
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = [
        f"spec {spec.name} ({plan.spec_hash}): {len(plan.variants)} variant(s) x "
        f"{len(spec.seeds)} seed(s) = {plan.n_runs} run(s); tracking {spec.tracking.uri}, "
        f"experiment {spec.tracking.experiment}",
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def data_key(cfg: DataConfig) -> str:
    """The key of a `data` section among prepared data: its canonical JSON."""
    return json.dumps(cfg.model_dump(mode="json"), sort_keys=True)


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
