"""The `train:` and `tracking:` sections of an experiment spec.

Every field has a default that runs on a CPU, so a spec needs only a `name`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

import registry
from minimind.foundations.corrections import DEFAULT_CORRECTION, Correction
from minimind.foundations.paths import DEFAULT_TRACKING_URI
from minimind.foundations.strict_config import StrictNumbers, field_error
from minimind.spec.naming import check_name

MAX_SEED = 2**32 - 1  # numpy's generators take no larger seed


# The smallest spike window that scores at all (`minimind.training.probes.guard.MIN_HISTORY`).
MIN_SPIKE_WINDOW = 8


class Section(StrictNumbers):
    """The base of every section of a spec: strict numbers, and an unknown key is an error."""

    model_config = ConfigDict(extra="forbid")


class OptimizerConfig(Section):
    """The registry's `optimizer` slot: `name` (adamw, sgd, muon or a plugin's), the `lr` and
    `weight_decay` every optimizer takes, and the named optimizer's own options (`minimind
    registry optimizer` lists them), filled in with their defaults once validated."""

    model_config = ConfigDict(extra="allow")

    name: str = "adamw"
    lr: float = Field(default=3.0e-3, gt=0)
    weight_decay: float = Field(default=0.1, ge=0)

    @model_validator(mode="after")
    def _registered(self) -> OptimizerConfig:
        options = dict(self.model_extra or {})
        try:
            self.name, resolved = registry.resolve("optimizer", {"name": self.name, **options})
        except registry.RegistryError as err:
            field_error((err.option or "name",), str(err))
        self.__pydantic_extra__ = resolved
        return self

    def options(self) -> dict[str, Any]:
        """The named optimizer's own options (everything but name, lr and weight_decay)."""
        return dict(self.model_extra or {})


# A warm-up the spec leaves unset is a tenth of the planned steps (30 at the default 300 steps),
# at most WARMUP_CAP; a run bounded only by time gets TIME_BOUND_WARMUP.
WARMUP_CAP = 1000
TIME_BOUND_WARMUP = 30


class ScheduleConfig(Section):
    """Learning-rate schedule: linear warmup over `warmup` steps, then the named decay.

    `min_lr_ratio` is the final lr as a fraction of `optimizer.lr` (cosine, linear, wsd).
    `decay_fraction` is the share of the run spent in wsd's final decay (warmup-stable-decay).
    `warmup` left unset (null) follows the run's length (`TrainConfig.warmup_steps`), so a
    default never makes a short run invalid.
    `branches` (wsd only): budgets in steps, each trained as a branch that decays from the
    stable phase of one run to the largest budget (`train.steps`), every branch bit for bit
    the plain wsd run of its steps (`minimind.run.branches`).
    """

    name: Literal["cosine", "linear", "constant", "wsd"] = "cosine"
    warmup: int | None = Field(default=None, ge=0)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    decay_fraction: float = Field(default=0.2, gt=0, le=1)
    branches: list[int] | None = Field(default=None, min_length=1)

    @field_validator("branches")
    @classmethod
    def _distinct_positive(cls, branches: list[int] | None) -> list[int] | None:
        if branches is not None and (min(branches) <= 0 or len(set(branches)) < len(branches)):
            raise ValueError(f"budgets must be distinct positive steps, got {branches}")
        return branches


class EvalTaskConfig(Section):
    """A downstream task scored in the training loop (`minimind.downstream`): its items from the
    JSONL file at `path` (relative to the working directory), the first `limit` of them (null:
    all), logged as `eval/<name>/acc`, `acc_norm`, `acc_centered` and `bpb`."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    path: str = Field(min_length=1)
    limit: int | None = Field(default=200, gt=0)


class SpikeConfig(Section):
    """The spike guard (`minimind.training.probes.guard`): a loss or gradient norm more than `sigma`
    standard deviations above the mean of the last `window` steps is a spike; with `skip`, a
    spiking step does not update the weights (OLMo 2). A non-finite loss or gradient always
    stops the run."""

    window: int = Field(default=128, ge=MIN_SPIKE_WINDOW)
    sigma: float = Field(default=6.0, gt=0)
    skip: bool = False


class TrainConfig(Section):
    """The training loop. The run ends at the first of `steps`, `tokens` or `time_limit` (seconds).

    One optimizer step consumes `batch_size * grad_accum * seq_len` tokens.
    `data_seed` fixes the order of the training batches; null (the default) takes the run's
    seed, so that seed k of every variant sees the same batches (what a paired comparison
    pairs). Set it to vary the initialisation alone across seeds.
    `grad_clip` and `checkpoint_every` may be null to turn clipping and checkpoints off; with
    checkpoints off nothing is written, so `--resume` restarts an interrupted run from step 0
    (keep `checkpoint_every` set on any run worth protecting).
    """

    steps: int | None = Field(default=300, gt=0)
    tokens: int | None = Field(default=None, gt=0)
    time_limit: float | None = Field(default=None, gt=0)
    batch_size: int = Field(default=16, gt=0)
    seq_len: int = Field(default=128, gt=0)
    grad_accum: int = Field(default=1, gt=0)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    grad_clip: float | None = Field(default=1.0, gt=0)
    # coef · mean logsumexp(logits)² added to the objective (0: off); logged as train/z_loss
    z_loss: float = Field(default=0.0, ge=0)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    compile: bool = False
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    eval_every: int = Field(default=50, gt=0)
    eval_batches: int = Field(default=10, gt=0)
    # Also log `val/bpb_avg<K>` (and `val/loss_avg<K>`) at the end: the mean of the last K
    # periodic estimates, whose seed-to-seed sd is lower than one estimate's (null: not logged).
    eval_average_last: int | None = Field(default=None, ge=2)
    log_every: int = Field(default=10, gt=0)
    checkpoint_every: int | None = Field(default=100, gt=0)
    checkpoint_dir: str = Field(default="results/checkpoints", min_length=1)
    sample_tokens: int = Field(default=64, ge=0)
    data_seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    # Under torchrun (several ranks): `ddp` keeps a whole model on each rank; `fsdp` shards
    # parameters, gradients and optimizer state over the ranks (FSDP2, torch >= 2.6).
    parallel: Literal["ddp", "fsdp"] = "ddp"
    # The LM head and loss computed this many tokens at a time, never holding every token's
    # logits (`minimind.model.loss`); null: the whole batch's logits at once.
    loss_chunk_tokens: int | None = Field(default=None, gt=0)
    # Downstream tasks scored at the evaluations every `evals_every` steps (a multiple of
    # eval_every; null: every evaluation) and at the end (`minimind.downstream`).
    evals: list[EvalTaskConfig] = Field(default_factory=list)
    evals_every: int | None = Field(default=None, gt=0)

    @field_validator("evals")
    @classmethod
    def _distinct_eval_names(cls, evals: list[EvalTaskConfig]) -> list[EvalTaskConfig]:
        names = [task.name for task in evals]
        if len(set(names)) < len(names):
            raise ValueError(f"task names must be distinct, got {names}")
        return evals

    # Probes inside the model every this many steps, logged under probe/ (null: none); the
    # spike and NaN guard runs on every step (docs/diagnostics.md).
    probe_every: int | None = Field(default=None, gt=0)
    spike: SpikeConfig = Field(default_factory=SpikeConfig)

    @field_validator("parallel")
    @classmethod
    def _fsdp_available(cls, parallel: str) -> str:
        if parallel == "fsdp":
            import torch.distributed.fsdp

            if not hasattr(torch.distributed.fsdp, "fully_shard"):
                raise ValueError(f"fsdp needs torch >= 2.6 (FSDP2), this is {torch.__version__}")
        return parallel

    @model_validator(mode="after")
    def _budget(self) -> TrainConfig:
        if self.steps is None and self.tokens is None and self.time_limit is None:
            field_error(("steps",), "set at least one of steps, tokens or time_limit")
        warmup = self.schedule.warmup
        if self.steps is not None and warmup is not None and warmup >= self.steps:
            field_error(
                ("schedule", "warmup"), f"must be < train.steps ({self.steps}), got {warmup}"
            )
        return self

    @model_validator(mode="after")
    def _evals_at_evaluations(self) -> TrainConfig:
        if self.evals_every is not None and self.evals_every % self.eval_every:
            field_error(
                ("evals_every",),
                f"must be a multiple of train.eval_every ({self.eval_every}), got {self.evals_every}",
            )
        return self

    @model_validator(mode="after")
    def _branches_of_one_stable_phase(self) -> TrainConfig:
        branches, schedule = self.schedule.branches, self.schedule
        if branches is None:
            return self
        if schedule.name != "wsd":
            field_error(("schedule", "branches"), f"need schedule name wsd, got {schedule.name}")
        if schedule.warmup is None:  # else each budget's warm-up would be its own tenth
            field_error(("schedule", "warmup"), "budget branches share one warm-up: set it")
        if self.steps is None or self.tokens is not None or self.time_limit is not None:
            field_error(("schedule", "branches"), "need a budget of train.steps alone")
        assert self.steps is not None and schedule.warmup is not None
        if max(branches) > self.steps or min(branches) <= schedule.warmup:
            field_error(
                ("schedule", "branches"),
                f"every budget must lie after the warm-up ({schedule.warmup}) and at most "
                f"train.steps ({self.steps}), got {branches}",
            )
        return self

    @model_validator(mode="after")
    def _enough_evaluations(self) -> TrainConfig:
        planned, k = self.planned_steps, self.eval_average_last
        if planned is not None and k is not None:
            evaluations = math.ceil(planned / self.eval_every)  # and one at the last step
            if k > evaluations:
                field_error(
                    ("eval_average_last",),
                    f"must be at most the run's {evaluations} evaluations "
                    f"({planned} steps, eval_every {self.eval_every}), got {k}",
                )
        return self

    @model_validator(mode="after")
    def _muon_unsharded(self) -> TrainConfig:
        # Muon orthogonalises whole matrices and its composite state is not a torch.distributed
        # checkpoint state dict: neither holds for FSDP's sharded parameters
        if self.parallel == "fsdp" and self.optimizer.name == "muon":
            field_error(("optimizer", "name"), "muon does not run with parallel: fsdp; use ddp")
        return self

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.grad_accum * self.seq_len

    @property
    def planned_steps(self) -> int | None:
        """Optimizer steps allowed by `steps` and `tokens` (the smaller), None if only time bounds."""
        limits = [self.steps] if self.steps is not None else []
        if self.tokens is not None:
            limits.append(math.ceil(self.tokens / self.tokens_per_step))
        return min(limits) if limits else None

    @property
    def warmup_steps(self) -> int:
        """The warm-up the run uses: as written, else a tenth of the planned steps (capped)."""
        if self.schedule.warmup is not None:
            return self.schedule.warmup
        planned = self.planned_steps
        return TIME_BOUND_WARMUP if planned is None else min(WARMUP_CAP, planned // 10)

    @property
    def resolved_schedule(self) -> ScheduleConfig:
        """`schedule` with `warmup` filled in (`warmup_steps`), as the lr schedule needs it."""
        return self.schedule.model_copy(update={"warmup": self.warmup_steps})


class PowerHint(Section):
    """`power:` the difference in the objective an ablation should detect (`delta`) and the
    seed-to-seed sd expected (`sd`, as `minimind compare --noise` measures it); `--dry-run`
    prints the seeds per arm that detect it with 80% power under `correction`."""

    delta: float = Field(gt=0)
    sd: float = Field(gt=0)
    correction: Correction = DEFAULT_CORRECTION


class TrackingConfig(Section):
    """Where runs are logged. `experiment` defaults to the spec's `name`."""

    uri: str = Field(default=DEFAULT_TRACKING_URI, min_length=1)
    experiment: str | None = Field(default=None, min_length=1)

    @field_validator("experiment")
    @classmethod
    def _experiment_is_a_name(cls, experiment: str | None) -> str | None:
        # It is a directory under train.checkpoint_dir: a path would write elsewhere.
        return None if experiment is None else check_name(experiment)
