"""The optimizer and the learning-rate schedule of a training run.

The optimizer is the registry's `optimizer` slot (`registry/optimizer.py`: adamw, sgd, muon,
plugins), built from the spec's `train.optimizer`; weight decay spares norms, biases and
embeddings (`param_groups`).

The schedule is a multiplier on each param group's own lr (μP gives groups different lrs),
applied with `LambdaLR`, which writes Python floats
into `param_group["lr"]`. That is fine in eager mode and with a compiled *model* (the optimizer step
is not compiled). Compiling the optimizer step itself would need the lr as a 0-dim tensor, or every
new float value recompiles the step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

import registry
from minimind.model import mup
from minimind.model.lm import MiniMindLM
from minimind.model.meta import meta_device
from registry.optimizer import muon_split, newton_schulz_flops

if TYPE_CHECKING:
    from minimind.model.config import ModelConfig
    from minimind.spec.sections import OptimizerConfig, ScheduleConfig, TrainConfig

SCHEDULES = ("cosine", "linear", "constant", "wsd")


def build_optimizer(
    model: nn.Module, cfg: OptimizerConfig, fused: bool | None = None
) -> torch.optim.Optimizer:
    """The optimizer `cfg.name` over `model`'s parameters with the spec's `train.optimizer`.

    `fused`: AdamW's single fused kernel, by default on CUDA, where it saves a launch per tensor.
    Otherwise the multi-tensor (foreach) path, the fastest on the CPU.
    A `MiniMindLM` under `model.parametrization: mup` gets each parameter's μP lr and weight
    decay multipliers (`minimind.model.mup.lr_scales`), each param group at its own lr.
    """
    spec = {"name": cfg.name, **cfg.options()}
    scaled = {}
    if isinstance(model, MiniMindLM) and mup.is_mup(model.config):
        scaled["scales"] = mup.lr_scales(model, model.config, cfg.name)
    optimizer = registry.build(
        "optimizer",
        spec,
        model=model,
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        fused=fused,
        **scaled,
    )
    assert isinstance(optimizer, torch.optim.Optimizer)  # what the optimizer slot builds
    return optimizer


def describe_optimizer(model: nn.Module, cfg: OptimizerConfig) -> list[str]:
    """Which parameters each side of `muon` takes, one line per side, layer and expert indices
    written `*` (the dry run prints them); [] for the other optimizers, which take everything."""
    if cfg.name != "muon":
        return []
    sizes = {name: p.numel() for name, p in model.named_parameters()}
    lines = []
    for side, names in zip(("muon", "adamw"), muon_split(model), strict=True):
        patterns = dict.fromkeys(re.sub(r"\.\d+\.", ".*.", n) for n in names)
        total = sum(sizes[n] for n in names)
        lines.append(f"  {side}: {len(names)} tensors, {total:,} parameters: {', '.join(patterns)}")
    return lines


def optimizer_flops_per_step(model_cfg: ModelConfig, cfg: OptimizerConfig) -> int:
    """The FLOPs an optimizer step spends in matrix arithmetic of its own: Muon's Newton–Schulz
    iterations on each of its hidden matrices (`registry.optimizer.newton_schulz_flops`), about
    16% of the study's baseline's training FLOPs; 0 for AdamW, SGD and plugins, whose updates
    are elementwise (O(parameters), counted nowhere, as the model's elementwise work is not).
    The model of `model_cfg` is built on the meta device: only its parameters' shapes are read."""
    if cfg.name != "muon":
        return 0
    with meta_device():
        model = MiniMindLM(model_cfg)
    shapes = {name: p.shape for name, p in model.named_parameters()}
    ns_steps: int = cfg.options()["ns_steps"]  # validated: the default filled in
    hidden = muon_split(model)[0]  # 2-D, so each shape is (rows, columns)
    return sum(newton_schulz_flops((shapes[n][0], shapes[n][1]), ns_steps) for n in hidden)


def optimizer_flops_per_token(model_cfg: ModelConfig, train: TrainConfig) -> float:
    """`optimizer_flops_per_step` over the training tokens of one optimizer step: what a run's
    `optimizer_flops_per_token` param records."""
    return optimizer_flops_per_step(model_cfg, train.optimizer) / train.tokens_per_step


def lr_multiplier(step: int, cfg: ScheduleConfig, total_steps: int) -> float:
    """The factor on the base lr for optimizer step `step` (0-based) of `total_steps`.

    - warmup: linear, (step + 1) / warmup for step < warmup, so the first step already moves;
    - cosine / linear: from 1 down to min_lr_ratio over the steps after warmup;
    - constant: 1 after warmup;
    - wsd (warmup-stable-decay): 1 until the last `decay_fraction` of all steps, then linear
      down to min_lr_ratio at the final step.

    `cfg.warmup` must be filled in (`TrainConfig.resolved_schedule`).
    """
    warmup = cfg.warmup
    if warmup is None:
        raise ValueError("the schedule's warmup is unresolved; use TrainConfig.resolved_schedule")
    if step < warmup:
        return (step + 1) / warmup
    floor = cfg.min_lr_ratio
    if cfg.name == "constant":
        return 1.0
    if cfg.name == "wsd":
        decay_start = decay_start_step(total_steps, cfg)
        if step < decay_start:
            return 1.0
        progress = min(1.0, (step - decay_start) / max(1, total_steps - 1 - decay_start))
        return 1.0 - (1.0 - floor) * progress
    progress = min(1.0, (step - warmup) / max(1, total_steps - 1 - warmup))
    if cfg.name == "cosine":
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if cfg.name == "linear":
        return 1.0 - (1.0 - floor) * progress
    raise ValueError(f"train.schedule.name: unknown schedule {cfg.name!r}; choices: {SCHEDULES}")


def decay_start_step(total_steps: int, cfg: ScheduleConfig) -> int:
    """The first step (0-based) of a `total_steps`-step wsd run's decay: every step before it
    is at the full lr (after the warm-up) whatever the run's length, so a budget branch of
    `total_steps` forks from a longer run once this many steps are done. Never decreases with
    `total_steps` (the decay's length is rounded), so a shorter budget forks no later."""
    assert cfg.warmup is not None  # resolved (`TrainConfig.resolved_schedule`)
    decay_steps = max(1, round(cfg.decay_fraction * total_steps))
    return max(cfg.warmup, total_steps - decay_steps)


def build_schedule(
    optimizer: torch.optim.Optimizer, cfg: ScheduleConfig, total_steps: int | Callable[[], int]
) -> LambdaLR:
    """A `LambdaLR` whose multiplier is `lr_multiplier(step, cfg, total_steps)`.

    `total_steps` may be a callable, read at every step: a run bounded only by a time limit
    passes its running estimate of the steps that fit, so the decay ends near the deadline.
    Its state dict holds only numbers (the lambda is a closure, saved as None), so a checkpoint
    with it loads under `torch.load(weights_only=True)`.
    """
    if cfg.name not in SCHEDULES:
        raise ValueError(
            f"train.schedule.name: unknown schedule {cfg.name!r}; choices: {SCHEDULES}"
        )
    horizon = total_steps if callable(total_steps) else lambda: total_steps
    return LambdaLR(optimizer, lambda step: lr_multiplier(step, cfg, horizon()))
