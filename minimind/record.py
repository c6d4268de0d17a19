"""What a run is when stored in MLflow: its name, tags, params, checkpoint path and metrics.

The writers (`minimind run`, `minimind sweep`) build their runs with what is here, and the
readers (`minimind compare` and its report) find and group runs by these tags, never by parsing
a run's name.

- A parent run per `minimind run` invocation, tagged `minimind.role=parent` and `plan_hash`
  (the hash of the whole spec, by which `--resume` finds it; runs of earlier versions carry it
  as `spec_hash`, still read); a parent per study of
  `minimind sweep`, also tagged `study` and `variant`.
- A child run per variant × seed, named `<variant>/seed<k>`, or per trial (and seed), named
  `trial-<n>` (`trial-<n>/seed<k>`). Tags: `minimind.role=child`, `mlflow.parentRunId`,
  `variant`, `seed`, `plan_hash`, `component.<slot>` (and `component.<slot>.options`), the
  device it trained on (`device`, `precision`, and `gpu_name` on CUDA), `git_commit`, MLflow's standard `mlflow.user`, `mlflow.source.name` and
  `mlflow.source.git.commit`,
  `git_dirty` and the environment (`env.torch`, `env.cpu`, ...; `environment_tags`), with
  `environment/torch_config.txt` and, when dirty, `environment/git_diff.patch`; a trial's also `study`,
  `trial_number` and `state`; a ladder's, `rung` and `arm`; a run that did not finish,
  `failure_reason`. Params: the
  flattened resolved spec, `seed` and the model's size.
- Metrics: `RUN_METRICS`, each minimized but those `is_maximized` names. `val/loss` and
  `val/bpb` are exact (every held-out token, once at the end); their curves are
  `val/loss_sampled` and `val/bpb_sampled` (`curve_metric`).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import registry
from minimind.downstream.metrics import is_maximized_eval

if TYPE_CHECKING:
    import torch

    from minimind.model.config import ModelConfig

ROLE_TAG = "minimind.role"
PARENT_ROLE, CHILD_ROLE = "parent", "child"
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own: the UI nests a child under its parent
RUN_NAME_TAG = "mlflow.runName"
PLAN_HASH_TAG = "plan_hash"  # of the whole spec an invocation ran, every variant in it
# The tag runs recorded before the hashes had names of their own carry the plan hash under;
# read (`plan_hash_lookups`, `compare.runs`), never written.
LEGACY_HASH_TAG = "spec_hash"
VARIANT_TAG = "variant"
SEED_TAG = "seed"
DATA_MANIFEST_TAG = "data_manifest"  # hash of the prepared token shards' manifest the run read
GIT_COMMIT_TAG = "git_commit"
# Where a run's numbers came from besides its spec and seed (`environment_tags`): the source
# tree's state and the machine's libraries and CPU, each `env.<item>` of
# `training.machine.environment` (python, torch, numpy, build, cpu, cpu_flags; gpu, cuda, cudnn).
GIT_DIRTY_TAG = "git_dirty"
ENV_TAG_PREFIX = "env."
TORCH_CONFIG_ARTIFACT = "environment/torch_config.txt"  # torch.__config__.show(), whole
GIT_DIFF_ARTIFACT = "environment/git_diff.patch"  # the uncommitted changes, when dirty
# MLflow's standard tags (`mlflow.utils.mlflow_tags`), which its UI shows as the run's user,
# source and version; set by the tracker beside `git_commit`.
USER_TAG = "mlflow.user"
SOURCE_NAME_TAG = "mlflow.source.name"
SOURCE_TYPE_TAG = "mlflow.source.type"
SOURCE_COMMIT_TAG = "mlflow.source.git.commit"
FAILURE_REASON_TAG = "failure_reason"
COMPONENT_TAG_PREFIX = "component."
DEVICE_TAG = "device"  # the device the run trained on: `cpu`, `cuda` or `mps`, never `auto`
GPU_NAME_TAG = "gpu_name"
PRECISION_TAG = "precision"  # the autocast dtype used: `bf16`, or `fp32` without autocast
STUDY_TAG = "study"
# A ladder's runs (`ladder:` in a spec): the rung (model size) and the arm (the ablation cell,
# named as at every rung), so that a reader groups a rung's arms, or an arm's rungs, by tag.
RUNG_TAG = "rung"
ARM_TAG = "arm"
# A budget branch's run (`train.schedule.branches`): its budget in steps; the variant is
# `budget=<steps>,<variant>` and `arm` the variant without the budget.
BUDGET_TAG = "budget"
TRIAL_NUMBER_TAG = "trial_number"
TRIAL_STATE_TAG = "state"  # `complete`, `pruned` or `failed`
# The process that owns a parent run, so that a later invocation can tell that it died.
PID_TAG = "minimind.pid"
HOST_TAG = "minimind.host"
# A run created while the tracking server was away lives first in a fallback file under a local
# id; `minimind sync` creates it with this tag, by which a second sync finds it again.
OFFLINE_ID_TAG = "minimind.offline_id"
PID_START_TAG = "minimind.pid_start"  # the process's start time: a reused pid is another process
SLURM_JOB_TAG = "slurm.job_id"  # the Slurm job that trains a run (`<array>_<task>` in an array)

RUN_METRICS: tuple[str, ...] = (
    "train/loss",
    "train/aux_loss",
    "train/z_loss",
    "val/loss",  # exact: every held-out token, at the end of the run
    "val/bpb",
    "val/loss_sampled",  # the periodic estimate over `train.eval_batches` fixed batches
    "val/bpb_sampled",
    "opt/lr",
    "opt/grad_norm",
    "perf/tokens_per_s",
    "perf/step_ms",
    "perf/mfu",
    "sys/peak_mem_mb",
    "moe/load_cv",
    "train/tokens",  # tokens seen, so curves can be drawn against tokens
    "time/elapsed_s",  # training wall-clock, so curves can be drawn against time
    "time/first_step_s",  # a process's first step, compiling or a compile-cache hit included
)
"""The metrics a training run logs (`moe/load_cv` only with MoE layers): what a sweep can
optimize and a comparison can rank by."""

_MAXIMIZED_METRICS = frozenset({"perf/tokens_per_s", "perf/mfu"})

EXACT_METRICS = ("val/loss", "val/bpb")
"""Scored once, at the end of a run, over the whole held-out split; each has a cheaper
periodic estimate named by `curve_metric`."""


# The held-out suite's metrics (`data.eval_sets`): `val/<name>/loss`, `val/<name>/bpb` and
# `val/bpb_macro`, exact like `val/bpb`, each with its `_sampled` curve.
EVAL_SET_METRIC = re.compile(r"val/[A-Za-z0-9][A-Za-z0-9_-]*/(loss|bpb)|val/bpb_macro")


def is_exact_metric(metric: str) -> bool:
    """Whether `metric` is scored once, at the end, over a whole held-out split (`EXACT_METRICS`
    and the suite's `EVAL_SET_METRIC`)."""
    return metric in EXACT_METRICS or EVAL_SET_METRIC.fullmatch(metric) is not None


def is_run_metric(metric: str) -> bool:
    """Whether a training run logs `metric` (`RUN_METRICS`, or an evaluation set's), so that a
    sweep may optimize it."""
    return metric in RUN_METRICS or (
        isinstance(metric, str) and EVAL_SET_METRIC.fullmatch(metric) is not None
    )


def curve_metric(metric: str) -> str:
    """The metric logged at every evaluation for `metric`'s curve: `val/bpb` ->
    `val/bpb_sampled` (the exact `val/bpb` is logged once, at the end); others are their own."""
    return f"{metric}_sampled" if is_exact_metric(metric) else metric


def is_maximized(metric: str) -> bool:
    """Whether a larger value of `metric` is better: throughput, MFU and the downstream
    accuracies (`eval_metric`); every other metric (losses, bpb, and any metric the runner does
    not log) is minimized."""
    return metric in _MAXIMIZED_METRICS or is_maximized_eval(metric)


def child_run_name(variant: str, seed: int) -> str:
    """The name of a `minimind run` child: `<variant>/seed<k>`."""
    return f"{variant}/seed{seed}"


def trial_run_name(number: int, seed: int, n_seeds: int) -> str:
    """The name of a sweep trial's run: `trial-<n>`, or `trial-<n>/seed<k>` with several seeds
    per trial."""
    return f"trial-{number}" if n_seeds == 1 else f"trial-{number}/seed{seed}"


def process_tags() -> dict[str, str]:
    """The tags naming this process (its id, start time and host): a RUNNING run whose process is
    gone is stale (`Tracker.close_dead_parents`)."""
    from minimind.foundations.processes import start_time

    tags = {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}
    started = start_time(os.getpid())
    if started is not None:
        tags[PID_START_TAG] = started
    return tags


def standard_tags(commit: str | None) -> dict[str, str]:
    """MLflow's standard tags of a run this process creates: the user, the program (its
    entry point, as MLflow's own context names it) and, in a git checkout, the commit."""
    import getpass
    import sys

    tags = {SOURCE_NAME_TAG: os.path.basename(sys.argv[0]) or "minimind", SOURCE_TYPE_TAG: "LOCAL"}
    try:
        tags[USER_TAG] = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        pass
    if commit is not None:
        tags[SOURCE_COMMIT_TAG] = commit
    return tags


def slurm_job_tags() -> dict[str, str]:
    """The tag naming the Slurm job this process runs in (none outside one): a failed job's run
    points at its job, and so at its log."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")
    return {SLURM_JOB_TAG: job} if job else {}


def parent_tags(plan_hash: str) -> dict[str, str]:
    """The tags of a `minimind run` parent (the tracker adds the role): `plan_hash`, the whole
    spec's hash."""
    return {PLAN_HASH_TAG: plan_hash}


def plan_hash_lookups(plan_hash: str) -> list[dict[str, str]]:
    """The tags that find the runs of an invocation of the spec hashing to `plan_hash`, in
    turn: its own tag, then the legacy tag that runs of earlier versions carry it under."""
    return [{PLAN_HASH_TAG: plan_hash}, {LEGACY_HASH_TAG: plan_hash}]


def study_parent_tags(study: str, variant: str, plan_hash: str) -> dict[str, str]:
    """The tags of a study's parent run: its study, its ablation cell and the whole spec's
    hash, as its trials' runs and `minimind run` have it."""
    return {STUDY_TAG: study, VARIANT_TAG: variant, PLAN_HASH_TAG: plan_hash}


def child_params(
    flat_spec: Mapping[str, Any],
    cfg: ModelConfig,
    seq_len: int,
    seed: int,
    optimizer_flops_per_token: float,
) -> dict[str, Any]:
    """A child run's params: its flattened resolved spec (`spec.flatten`), its seed, the size
    of its model `cfg` (`flops_per_token`: the model's FLOPs per token at `seq_len`, what MFU
    counts) and the FLOPs per training token its optimizer adds (`optimizer_flops_per_token`:
    `optim.optimizer_flops_per_step` over the tokens of a step). A comparison's
    `training_flops_per_token` is their sum; runs recorded before the optimizer's param count it
    as none."""
    return {
        **flat_spec,
        "seed": seed,
        "num_params": cfg.num_params(),
        "num_active_params": cfg.num_active_params(),
        "num_non_embedding_params": cfg.num_non_embedding_params(),
        "flops_per_token": cfg.flops_per_token(seq_len),
        "optimizer_flops_per_token": optimizer_flops_per_token,
    }


TRAIN_SPLIT_TOKENS_PARAM = "train_split_tokens"  # the prepared training split's tokens
EPOCHS_PARAM = "epochs"  # of the training split that the run's planned steps read


def data_budget_params(tokens: int | None, train_split_tokens: int) -> dict[str, Any]:
    """A child run's data budget params: its training split's tokens and the epochs of it its
    planned training `tokens` read (none when only time bounds it). Recorded on the run, so that
    a report reads them from the run, not from a token cache another machine lacks."""
    params: dict[str, Any] = {TRAIN_SPLIT_TOKENS_PARAM: train_split_tokens}
    if tokens is not None and train_split_tokens > 0:
        params[EPOCHS_PARAM] = tokens / train_split_tokens
    return params


def child_tags(
    plan_hash: str,
    variant: str,
    cfg: ModelConfig,
    seed: int,
    run_device: ResolvedDevice,
    *,
    data_manifest: str,
) -> dict[str, str]:
    """A child run's tags (the tracker adds the role, the parent and `git_commit`): its variant
    and seed, the whole spec's hash, the manifest hash of the data it reads
    (`PreparedData.manifest_hash`), the components of its model `cfg` and the device (and
    autocast dtype) it trains with."""
    tags = {
        VARIANT_TAG: variant,
        SEED_TAG: str(seed),
        PLAN_HASH_TAG: plan_hash,
        DATA_MANIFEST_TAG: data_manifest,
    }
    tags.update(component_tags(cfg))
    tags.update(device_tags(run_device))
    return tags


def environment_tags(environment: Mapping[str, str], dirty: bool | None) -> dict[str, str]:
    """A run's provenance tags: `env.<item>` per item of the machine's environment and
    `git_dirty` (`true`/`false`; absent outside a git tree)."""
    tags = {f"{ENV_TAG_PREFIX}{item}": value for item, value in environment.items()}
    if dirty is not None:
        tags[GIT_DIRTY_TAG] = "true" if dirty else "false"
    return tags


def ladder_tags(rung: str | None, arm: str | None) -> dict[str, str]:
    """What a ladder's child run is tagged with besides `child_tags`: its rung and its arm
    (nothing for a run of a spec without a ladder, `rung` None)."""
    if rung is None or arm is None:
        return {}
    return {RUNG_TAG: rung, ARM_TAG: arm}


def trial_tags(study: str, number: int) -> dict[str, Any]:
    """What a trial's run is tagged with besides `child_tags`."""
    return {TRIAL_NUMBER_TAG: number, STUDY_TAG: study}


class ResolvedDevice(Protocol):
    """What the tags read of a run's resolved device (`minimind.training.device.RunDevice`, a layer
    below this one, hence a protocol rather than an import)."""

    @property
    def device(self) -> torch.device: ...

    @property
    def precision(self) -> str: ...


def device_tags(run_device: ResolvedDevice) -> dict[str, str]:
    """`device` (its type: `cpu`, `cuda`, `mps`), `precision` (`RunDevice.precision`: `bf16`,
    or `fp32` without autocast) and, on CUDA, `gpu_name`."""
    # Imported here: the spec checks sweep objectives against `RUN_METRICS`, and a spec error
    # must not wait for torch.
    import torch

    device = run_device.device
    tags = {DEVICE_TAG: device.type, PRECISION_TAG: run_device.precision}
    if device.type == "cuda":
        tags[GPU_NAME_TAG] = torch.cuda.get_device_name(device)
    return tags


def component_tags(cfg: ModelConfig) -> dict[str, str]:
    """`component.<slot>` -> the component's name, for every slot, and
    `component.<slot>.options` -> `k=v,...` where options differ from the defaults, so that a
    filter `tags.`component.mlp` = 'moe'` matches every MoE run whatever its options."""
    tags = {}
    for slot in registry.MODEL_SLOTS:
        name, options = cfg.component(slot)
        tags[f"{COMPONENT_TAG_PREFIX}{slot}"] = name
        changed = _changed_options(slot, name, options)
        if changed:
            tags[f"{COMPONENT_TAG_PREFIX}{slot}.options"] = ",".join(changed)
    return tags


def component_labels(cfg: ModelConfig) -> dict[str, str]:
    """`component_label` of every slot of `cfg`, in `registry.MODEL_SLOTS` order."""
    return {slot: component_label(slot, *cfg.component(slot)) for slot in registry.MODEL_SLOTS}


def component_label(slot: str, name: str, options: dict[str, Any]) -> str:
    """`rope`, or `rope(style=gptj)` when options differ from the component's defaults."""
    changed = _changed_options(slot, name, options)
    return f"{name}({','.join(changed)})" if changed else name


def _changed_options(slot: str, name: str, options: dict[str, Any]) -> list[str]:
    """`k=v` for each option of the component that differs from its default."""
    defaults = {o.name: o.default for o in registry.describe(slot, name)}
    return [f"{k}={v}" for k, v in options.items() if defaults.get(k) != v]


def checkpoint_path(
    checkpoint_dir: str | Path, experiment: str, plan_hash: str, variant: str, seed: int
) -> Path:
    """`<checkpoint_dir>/<experiment>/<plan_hash>/<variant>/seed<k>/last.pt`: where the runs of
    one variant × seed keep their checkpoints, each under its own run id
    (`RunCheckpoint.file`: `.../seed<k>/<child run id>/last.pt`), so a resumed run finds its own
    and two invocations of one spec never share a file."""
    return Path(checkpoint_dir) / experiment / plan_hash / variant / f"seed{seed}" / "last.pt"
