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
once the corpus is tokenized, so a corpus too short for `train.seq_len` is refused by
`prepare_data`, which then removes the token cache it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from minimind.data import DataConfig, PreparedData, prepare_data
from minimind.data.mixture import repeating_sources
from minimind.data.tokenizer import load_tokenizer
from minimind.downstream.tasks import Task, TaskFileError, load_task, longest_request
from minimind.foundations.plain_table import plain_table
from minimind.foundations.writable import unwritable_dir
from minimind.model.initialisation import InitialDraw, shared_fraction
from minimind.model.lm import MiniMindLM
from minimind.model.meta import meta_device
from minimind.run.branches import budgets, describe_branches
from minimind.spec import Spec, SpecError, Variant, expand, spec_hash
from minimind.spec.errors import did_you_mean
from minimind.tracking.backend import store_problem
from minimind.training import distributed
from minimind.training.device import (
    TRAINING_BYTES_PER_PARAM,
    device_memory_bytes,
    resolve_device,
    resolve_run_device,
)
from minimind.training.optim import describe_optimizer, optimizer_flops_per_token
from minimind.training.probes.monitor import describe as describe_probes


@dataclass(frozen=True)
class Plan:
    """A validated spec, the variants it expands to and the hash of the whole spec."""

    spec: Spec
    variants: list[Variant]
    plan_hash: str

    @property
    def n_runs(self) -> int:
        """The runs the plan trains: a run per variant × seed, or per budget of it with budget
        branches."""
        return sum(len(budgets(v.spec.train)) or 1 for v in self.variants) * len(self.spec.seeds)


def plan_run(spec: Spec, world_size: int | None = None, only: Sequence[str] = ()) -> Plan:
    """Expand a validated spec (`minimind.spec.load_spec`) for `world_size` ranks (default: this
    process group's) and check it against this machine; raises `SpecError`. Writes nothing.
    `only`: the names of the variants to train (`minimind run --variant`), all when empty; the
    whole spec is expanded first, so a `match:` resizes them against its first variant as ever."""
    variants = expand(spec)
    names = [v.name for v in variants]
    for name in only:
        if name not in names:
            raise SpecError(
                "--variant",
                f"no variant {name!r}; variants: {', '.join(names)}" + did_you_mean(name, names),
            )
    if only:
        variants = [v for v in variants if v.name in only]
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
    for variant in variants:
        _check_fits(variant, world_size)
    sizes = {}  # each tokenizer loaded once
    for variant in variants:
        path = variant.spec.data.tokenizer.path
        if path is not None:
            if path not in sizes:
                sizes[path] = _tokenizer_size(path)
            _check_vocab(sizes[path], variant.spec.model_config_obj().vocab_size)
    _check_outputs(spec, variants)
    for variant in variants:
        eval_tasks(variant)
    return Plan(spec, variants, spec_hash(spec))


def eval_tasks(variant: Variant) -> list[Task]:
    """The variant's downstream tasks (`train.evals`), read; SpecError naming a bad file."""
    tasks = []
    for i, task in enumerate(variant.spec.train.evals):
        try:
            tasks.append(load_task(task.name, task.path, task.limit))
        except TaskFileError as err:
            raise SpecError(f"train.evals.{i}.path", str(err)) from None
    return tasks


def _check_eval_lengths(variant: Variant, tokenizer: Tokenizer) -> None:
    """Every request of every task fits the model's context with this tokenizer."""
    max_len = variant.spec.model_config_obj().max_seq_len
    for i, task in enumerate(eval_tasks(variant)):
        needed = longest_request(task, tokenizer) - 1  # the last token is only a target
        if needed > max_len:
            raise SpecError(
                f"train.evals.{i}",
                f"task {task.name}: its longest context + continuation needs {needed} tokens of "
                f"context, more than model.max_seq_len ({max_len}) with this tokenizer",
            )


# Activation bytes a transformer layer keeps for the backward pass, per token and unit of width,
# in 16-bit: 34 (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
# Models", section 4.1, less the attention scores SDPA does not store); twice that in fp32.
ACTIVATION_BYTES_PER_TOKEN_AND_WIDTH = 34
# Refused above this many times the device's memory: no error of the estimate makes that fit.
REFUSE_ABOVE = 4


@dataclass(frozen=True)
class MemoryEstimate:
    """What one process needs to train a variant, in bytes: `state` (fp32 parameters, gradients
    and AdamW's moments) and `activations` (one micro-batch's kept activations and its logits
    with their gradient), against `available` (the device's memory, None where unknown)."""

    state: int
    activations: int
    available: int | None
    device: str
    tokens: int  # of one micro-batch

    @property
    def total(self) -> int:
        return self.state + self.activations

    def describe(self) -> str:
        return (
            f"needs about {self.total / 2**30:,.1f} GiB: parameters, gradients and AdamW state "
            f"{self.state / 2**30:,.1f} GiB, activations and logits of a micro-batch of "
            f"{self.tokens:,} tokens {self.activations / 2**30:,.1f} GiB"
        )


def memory_estimate(variant: Variant, world_size: int | None = None) -> MemoryEstimate:
    """The memory a process needs to train `variant` (see `MemoryEstimate`)."""
    cfg, train = variant.spec.model_config_obj(), variant.spec.train
    run_device = resolve_run_device(train, cfg.dim)
    device = run_device.device
    tokens = distributed.local_batch_size(train.batch_size, world_size) * train.seq_len
    element = 1 if run_device.amp_dtype is not None else 2
    layers = tokens * cfg.n_layers * cfg.dim * ACTIVATION_BYTES_PER_TOKEN_AND_WIDTH * element
    logits = min(tokens, train.loss_chunk_tokens or tokens) * cfg.padded_vocab_size * 4 * 2
    return MemoryEstimate(
        cfg.num_params() * TRAINING_BYTES_PER_PARAM,
        layers + logits,
        device_memory_bytes(device),
        device.type,
        tokens,
    )


def _check_fits(variant: Variant, world_size: int | None) -> None:
    """Refuse a variant whose estimate exceeds its device's memory `REFUSE_ABOVE` times: it
    would fail when allocating, after the corpus is tokenized (`SpecError` on the size that
    dominates)."""
    estimate = memory_estimate(variant, world_size)
    if estimate.available is None or estimate.total <= REFUSE_ABOVE * estimate.available:
        return
    # The lever: the model when its state alone cannot fit (its vocabulary when the embedding
    # is most of it), else the micro-batch, which the activations and logits grow with.
    cfg = variant.spec.model_config_obj()
    if estimate.state > REFUSE_ABOVE * estimate.available:
        embedding = cfg.padded_vocab_size * cfg.dim
        field = "model.vocab_size" if 2 * embedding > cfg.num_params() else "model"
    else:
        field = "train.batch_size"
    raise SpecError(
        field,
        f"{variant.name} cannot fit: it {estimate.describe()}; the {estimate.device} has "
        f"{estimate.available / 2**30:,.1f} GiB",
    )


def _tokenizer_size(path: str) -> int:
    """The vocabulary size of the tokenizer at `path`, its specials included."""
    try:
        return load_tokenizer(path).get_vocab_size()
    except Exception as err:  # tokenizers raises a bare Exception for a file it cannot read
        raise SpecError("data.tokenizer.path", f"{path} is not a tokenizer.json: {err}") from None


def _check_vocab(tokenizer_size: int, vocab_size: int) -> None:
    """The model has a row for each of the tokenizer's ids (checked before tokenizing when the
    tokenizer is a file, after preparing when it is trained)."""
    if tokenizer_size > vocab_size:
        raise SpecError(
            "model.vocab_size",
            f"must be >= the tokenizer's {tokenizer_size} tokens, got {vocab_size}",
        )


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
            # each split must hold a window of the longest context of the runs that read it
            readers = [v for v in plan.variants if data_key(v.spec.data) == key]
            longest = max(v.spec.train.seq_len for v in readers)
            data[key] = prepare_data(variant.spec.data, min_tokens=longest)
        prepared = data[key]
        _check_vocab(prepared.vocab_size, variant.spec.model_config_obj().vocab_size)
        _check_eval_lengths(variant, prepared.tokenizer)
        _check_parts(prepared, variant.spec.train.seq_len)
    return data


def _check_parts(data: PreparedData, seq_len: int) -> None:
    """Every source of a mixture and every evaluation set holds a window of `seq_len` tokens."""
    parts = {f"data.sources.{s.name}": len(s.train_tokens) for s in data.sources}
    parts.update({f"data.eval_sets.{k}": len(held.tokens) for k, held in data.eval_sets.items()})
    for field, tokens in parts.items():
        if tokens < seq_len:
            raise SpecError(field, f"holds {tokens} tokens, fewer than train.seq_len={seq_len}")


def describe_plan(plan: Plan) -> str:
    """The `--dry-run` table: variants with parameter and FLOP counts, tokens per run, the
    precision each trains in on this machine, and the share of the first variant's (the
    baseline's; on a ladder, the first of its rung's) initial parameters each starts with
    bit-identical under the same seed (`minimind.model.initialisation`: what pairing by seed can
    cancel)."""
    spec = plan.spec
    models = _meta_models(plan)
    # Each variant against its rung's first (the baseline arm there), or the first variant.
    references: dict[str | None, dict[str, InitialDraw]] = {}
    for variant, model in zip(plan.variants, models, strict=True):
        references.setdefault(variant.rung, model.initial_draws)
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
        precision = resolve_run_device(train, cfg.dim).precision
        budget = [] if train.time_limit is None else [f"<= {train.time_limit:g} s"]
        optimizer = optimizer_flops_per_token(cfg, train)
        rows.append(
            [
                variant.name,
                f"{cfg.num_params():,}",
                f"{cfg.num_active_params():,}",
                f"{cfg.flops_per_token(train.seq_len):.3g}"
                + (f" + {optimizer:.3g} optimizer" if optimizer else ""),
                " ".join([f"{steps:,}" if steps else "-", *budget]),
                # A warm-up the spec did not set is derived from the steps: show which.
                f"{train.warmup_steps}" + ("" if train.schedule.warmup is not None else " (auto)"),
                f"{steps * train.tokens_per_step:,}" if steps else "-",
                f"{shared_fraction(references[variant.rung], model.initial_draws):.1%}",
                # `auto` is resolved for this machine and model: show what it became.
                precision + (" (auto)" if train.precision == "auto" else ""),
            ]
        )
    pairs = len(plan.variants) * len(spec.seeds)
    branched = "" if plan.n_runs == pairs else f" ({plan.n_runs} runs: every budget a run)"
    summary = (
        f"spec {spec.name} ({plan.plan_hash}): {len(plan.variants)} variant(s) x "
        f"{len(spec.seeds)} seed(s) = {pairs} run(s){branched}; tracking {spec.tracking.uri}, "
        f"experiment {spec.tracking.experiment}"
    )
    probes = dict.fromkeys(describe_probes(v.spec.train) for v in plan.variants)
    return "\n".join(
        [
            summary,
            plain_table(headers, rows),
            *_ladder_budget(spec),
            *describe_branches([v.spec for v in plan.variants], len(spec.seeds)),
            *_repeating_sources(plan),
            *probes,
            *_memory_warnings(plan),
            *_optimizer_groups(plan, models),
        ]
    )


def _repeating_sources(plan: Plan) -> list[str]:
    """The training sources a variant's budget would draw more than once, with the epochs
    (known once the data section is prepared: `minimind data prepare`)."""
    lines = []
    for variant in plan.variants:
        data, train = variant.spec.data, variant.spec.train
        if train.planned_steps is None or data.sources is None:
            continue
        tokens = train.planned_steps * train.tokens_per_step
        repeats = repeating_sources(data, tokens)
        if repeats is None:
            lines.append(
                f"{variant.name}: source epochs known once prepared (minimind data prepare)"
            )
        for name, epochs in (repeats or {}).items():
            lines.append(
                f"{variant.name}: data.sources.{name} repeats: {epochs:.2f} epochs in {tokens:,} tokens"
            )
    return list(dict.fromkeys(lines))


def _ladder_budget(spec: Spec) -> list[str]:
    """How a ladder sizes its rungs' budgets, when the spec has one."""
    ladder = spec.ladder
    if ladder is None:
        return []
    # A power law E + A·C^-α has three parameters (`stats.scaling.fit_power_law`): said before
    # the rungs train rather than after.
    points = len(ladder.rungs) * max(1, len(ladder.budgets_per_param()))
    few = (
        [
            f"note: {len(ladder.rungs)} rungs: compare fits no power law below 3 rungs (no "
            "exponent, Δα or extrapolation), only the per-rung comparisons; add rungs for a fit"
        ]
        if points < 3
        else []
    )
    budgets = ladder.budgets_per_param()
    if not budgets:
        return [f"ladder: {len(ladder.rungs)} rungs, each with its own steps", *few]
    count = "every parameter" if ladder.params == "total" else "the non-embedding parameters"
    branched = (
        f" (budget branches at {', '.join(f'{b:g}' for b in budgets[:-1])})"
        if len(budgets) > 1
        else ""
    )
    return [
        f"ladder: {len(ladder.rungs)} rungs, each training on {budgets[-1]:g} tokens per "
        f"parameter of its first arm ({count}){branched}, rounded up to whole steps",
        *few,
    ]


def _meta_models(plan: Plan) -> list[MiniMindLM]:
    """Each variant's model on the meta device: its parameters' names, shapes and draws, no
    values."""
    models = []
    for variant in plan.variants:
        with meta_device():
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


def check_memory(plan: Plan) -> None:
    """Refuse, before a real run starts, a variant estimated past its device's memory (what the
    dry run warns of: it would fail when allocating or swap the host), unless the spec says
    `limits.over_memory: warn` (`SpecError` on `limits.over_memory`)."""
    if plan.spec.limits.over_memory == "warn":
        return
    for variant in plan.variants:
        estimate = memory_estimate(variant)
        if estimate.available is not None and estimate.total > estimate.available:
            raise SpecError(
                "limits.over_memory",
                f"{variant.name} {estimate.describe()}; the {estimate.device} has "
                f"{estimate.available / 2**30:,.1f} GiB (set it to warn to run it anyway)",
            )


def _memory_warnings(plan: Plan) -> list[str]:
    """A line for each variant whose estimated memory (`memory_estimate`) exceeds the memory of
    the device it would run on."""
    warnings = []
    for variant in plan.variants:
        estimate = memory_estimate(variant)
        if estimate.available is not None and estimate.total > estimate.available:
            warnings.append(
                f"warning: {variant.name} {estimate.describe()}; the {estimate.device} has "
                f"{estimate.available / 2**30:,.1f} GiB"
            )
    return warnings
