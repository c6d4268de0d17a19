"""The optimizer and the learning-rate schedule of a training run.

Weight decay: parameters with fewer than two dimensions (norm gains, biases, the MoE router's
scalars) and every embedding table (`nn.Embedding` modules, or any parameter whose name contains
"embed") get no decay. Decaying them shrinks scales and lookup rows rather than regularising a
linear map. A tied LM head shares its tensor with the token embedding, so it is not decayed either.

The schedule is a multiplier on the base lr, applied with `LambdaLR`, which writes Python floats
into `param_group["lr"]`. That is fine in eager mode and with a compiled *model* (the optimizer step
is not compiled). Compiling the optimizer step itself would need the lr as a 0-dim tensor, or every
new float value recompiles the step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

if TYPE_CHECKING:
    from minimind.spec.sections import OptimizerConfig, ScheduleConfig

SCHEDULES = ("cosine", "linear", "constant", "wsd")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Split the trainable parameters into a decayed group and a non-decayed group.

    `named_parameters()` yields a shared (tied) tensor once, under its first name.
    """
    embedding_params = {
        id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()
    }
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or id(p) in embedding_params or "embed" in name:
            no_decay.append(p)
        else:
            decay.append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(
    model: nn.Module, cfg: OptimizerConfig, fused: bool | None = None
) -> torch.optim.Optimizer:
    """AdamW over `param_groups(model)` with the spec's `train.optimizer` settings.

    `fused`: one fused kernel for the whole update; by default on CUDA, where it saves a launch
    per tensor. Otherwise the multi-tensor (foreach) path, the fastest on the CPU.
    """
    if cfg.name != "adamw":
        raise ValueError(f"train.optimizer.name: unknown optimizer {cfg.name!r}; choices: adamw")
    if fused is None:
        fused = next(model.parameters()).device.type == "cuda"
    return torch.optim.AdamW(
        param_groups(model, cfg.weight_decay),
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        fused=True if fused else None,
        foreach=None if fused else True,
    )


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
        decay_steps = max(1, round(cfg.decay_fraction * total_steps))
        decay_start = max(warmup, total_steps - decay_steps)
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
