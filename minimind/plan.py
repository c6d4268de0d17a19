"""From a loaded spec to what `minimind run` and `minimind sweep` will train, checked before
anything is written.

    spec = load_spec("experiments/norm.yaml", ["train.steps=50"])  # raises SpecError, no torch
    plan = plan_run(spec)                                          # raises SpecError
    print(describe_plan(plan))                                     # the --dry-run table
    data = prepare_all(plan)                                       # the token cache, checked

A plan is the validated spec, its variants (one per ablation cell) and `plan_hash`, the hash of
the whole spec that tags its runs and names its checkpoint folder. Planning also checks what
the spec cannot check alone, each failure a `SpecError` naming its field: the device exists on
this machine and the batch divides among the ranks; a `data.tokenizer.path` holds a tokenizer;
MLflow has a store for `tracking.uri`; every directory a run writes (`data.cache_dir`,
`train.checkpoint_dir`, a sqlite database's) can be created and written. Preparing the data
checks each variant's vocabulary and context against the corpus; the token count is known only
once the corpus is tokenized, so a corpus too short for `train.seq_len` leaves its complete
token cache behind (keyed by the corpus and tokenizer, not by `seq_len`, so that the corrected
spec reuses it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from minimind import distributed
from minimind.data import DataConfig, PreparedData, prepare_data
from minimind.data.tokenizer import load_tokenizer
from minimind.device import (
    TRAINING_BYTES_PER_PARAM,
    autocast_dtype,
    device_memory_bytes,
    resolve_device,
)
from minimind.initialisation import shared_fraction
from minimind.model import MiniMindLM
from minimind.optim import describe_optimizer
from minimind.plain_table import plain_table
from minimind.record import PRECISION_TAG, device_tags
from minimind.spec import Spec, SpecError, Variant, expand, spec_hash
from minimind.tracking.backend import store_problem
from minimind.writable import unwritable_dir


@dataclass(frozen=True)
class Plan:
    """A validated spec, the variants it expands to and the hash of the whole spec."""

    spec: Spec
    variants: list[Variant]
    plan_hash: str

    @property
    def n_runs(self) -> int:
        return len(self.variants) * len(self.spec.seeds)


def plan_run(spec: Spec, world_size: int | None = None) -> Plan:
    """Expand a validated spec (`minimind.spec.load_spec`) for `world_size` ranks (default: this
    process group's) and check it against this machine; raises `SpecError`. Writes nothing."""
    variants = expand(spec)
    # Each distinct pair once: most specs give every variant the same device and batch size.
    for device, batch_size in dict.fromkeys(
        (v.spec.train.device, v.spec.train.batch_size) for v in variants
    ):
        try:
            resolve_device(device)
        except ValueError as err:
            raise SpecError("train.device", str(err)) from None
        try:
            distributed.local_batch_size(batch_size, world_size)
        except ValueError as err:
            raise SpecError("train.batch_size", str(err)) from None
    for path in dict.fromkeys(v.spec.data.tokenizer.path for v in variants):
        if path is not None:
            _check_tokenizer(path)
    _check_outputs(spec, variants)
    return Plan(spec, variants, spec_hash(spec))


def _check_tokenizer(path: str) -> None:
    try:
        load_tokenizer(path)
    except Exception as err:  # tokenizers raises a bare Exception for a file it cannot read
        raise SpecError("data.tokenizer.path", f"{path} is not a tokenizer.json: {err}") from None


def _check_outputs(spec: Spec, variants: list[Variant]) -> None:
    """Every place a run writes can be written, checked in the order the run writes them: the
    token cache, the tracking store, the checkpoints (of runs that write any)."""
    for directory in dict.fromkeys(v.spec.data.cache_dir for v in variants):
        _check_directory("data.cache_dir", directory)
    problem = store_problem(spec.tracking.uri)
    if problem is not None:
        raise SpecError("tracking.uri", problem)
    train = [v.spec.train for v in variants if v.spec.train.checkpoint_every is not None]
    for directory in dict.fromkeys(t.checkpoint_dir for t in train):
        _check_directory("train.checkpoint_dir", directory)


def _check_directory(field: str, directory: str) -> None:
    problem = unwritable_dir(directory)
    if problem is not None:
        raise SpecError(field, problem)


def data_key(cfg: DataConfig) -> str:
    """The key of a `data` section among prepared data: its canonical JSON."""
    return json.dumps(cfg.model_dump(mode="json"), sort_keys=True)


def prepare_all(plan: Plan) -> dict[str, PreparedData]:
    """Tokenized data per distinct `data` section (keyed by `data_key`), checked against each
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


def describe_plan(plan: Plan) -> str:
    """The `--dry-run` table: variants with parameter and FLOP counts, tokens per run, the
    precision each trains in on this machine, and the share of the first variant's (the
    baseline's) initial parameters each starts with bit-identical under the same seed
    (`minimind.initialisation`: what pairing by seed can cancel)."""
    spec = plan.spec
    models = _meta_models(plan)
    reference = models[0].initial_draws
    headers = [
        "variant",
        "params",
        "active",
        "FLOPs/token",
        "steps",
        "warmup",
        "tokens/run",
        "shares init",
        "precision",
    ]
    rows = []
    for variant, model in zip(plan.variants, models, strict=True):
        cfg, train = variant.spec.model_config_obj(), variant.spec.train
        steps = train.planned_steps
        device = resolve_device(train.device)
        tags = device_tags(device, autocast_dtype(train.precision, device, cfg.dim))
        budget = [] if train.time_limit is None else [f"<= {train.time_limit:g} s"]
        rows.append(
            [
                variant.name,
                f"{cfg.num_params():,}",
                f"{cfg.num_active_params():,}",
                f"{cfg.flops_per_token(train.seq_len):.3g}",
                " ".join([f"{steps:,}" if steps else "-", *budget]),
                # A warm-up the spec did not set is derived from the steps: show which.
                f"{train.warmup_steps}" + ("" if train.schedule.warmup is not None else " (auto)"),
                f"{steps * train.tokens_per_step:,}" if steps else "-",
                # `auto` is resolved for this machine and model: show what it became.
                f"{shared_fraction(reference, model.initial_draws):.1%}",
                tags[PRECISION_TAG] + (" (auto)" if train.precision == "auto" else ""),
            ]
        )
    summary = (
        f"spec {spec.name} ({plan.plan_hash}): {len(plan.variants)} variant(s) x "
        f"{len(spec.seeds)} seed(s) = {plan.n_runs} run(s); tracking {spec.tracking.uri}, "
        f"experiment {spec.tracking.experiment}"
    )
    return "\n".join(
        [
            summary,
            plain_table(headers, rows),
            *_memory_warnings(plan),
            *_optimizer_groups(plan, models),
        ]
    )


def _meta_models(plan: Plan) -> list[MiniMindLM]:
    """Each variant's model on the meta device: its parameters' names, shapes and draws, no
    values."""
    models = []
    for variant in plan.variants:
        with torch.device("meta"):
            models.append(MiniMindLM(variant.spec.model_config_obj(), init_seed=0))
    return models


def _optimizer_groups(plan: Plan, models: list[MiniMindLM]) -> list[str]:
    """Each variant's optimizer grouping where it has one (muon)."""
    lines = []
    for variant, model in zip(plan.variants, models, strict=True):
        groups = describe_optimizer(model, variant.spec.train.optimizer)
        if groups:
            lines += [f"{variant.name}: optimizer {variant.spec.train.optimizer.name}", *groups]
    return lines


def _memory_warnings(plan: Plan) -> list[str]:
    """A line for each variant whose parameters and optimizer state alone exceed the memory of
    the device it would run on."""
    warnings = []
    for variant in plan.variants:
        device = resolve_device(variant.spec.train.device)
        total = device_memory_bytes(device)
        need = variant.spec.model_config_obj().num_params() * TRAINING_BYTES_PER_PARAM
        if total is not None and need > total:
            warnings.append(
                f"warning: {variant.name}: parameters, gradients and AdamW state need "
                f"{need / 2**30:,.1f} GiB; the {device.type} has {total / 2**30:,.1f} GiB"
            )
    return warnings
