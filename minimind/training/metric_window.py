"""The training losses of one log window: summed on the device, read once, checked for NaN.

    window = MetricWindow(device)
    window.add(out.loss, out.aux_loss, z)         # per micro-batch, no host sync
    window.end_step(grad_norm)                    # per optimizer step
    means = window.close(grad_accum, step)        # per log step: WindowMeans, or why it failed

The hot path never reads a value back: the sums stay device tensors until `close`, which
averages them over the ranks in one all-reduce and reads them with one `.tolist()`, which is
also where a non-finite loss is noticed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from minimind.training import distributed


@dataclass(frozen=True)
class WindowMeans:
    """The window's means per micro-batch (over ranks too) and the last measured grad norm
    (NaN when none was measured)."""

    loss: float
    aux_loss: float
    z_loss: float
    grad_norm: float

    def metrics(self, with_z_loss: bool) -> dict[str, float]:
        """`train/loss`, `train/aux_loss`, `train/z_loss` (when the run has one) and
        `opt/grad_norm` (when measured)."""
        metrics = {"train/loss": self.loss, "train/aux_loss": self.aux_loss}
        if with_z_loss:
            metrics["train/z_loss"] = self.z_loss
        if not math.isnan(self.grad_norm):  # not measured: no clipping, and not a log step
            metrics["opt/grad_norm"] = self.grad_norm
        return metrics


class MetricWindow:
    """The loss, auxiliary loss and z-loss summed since the last log step, and the grad norm."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.loss_sum = torch.zeros((), device=device)
        self.aux_sum = torch.zeros((), device=device)
        self.z_sum = torch.zeros((), device=device)
        self.steps = 0
        self.grad_norm: torch.Tensor | None = None

    def add(self, loss: torch.Tensor, aux_loss: torch.Tensor, z_loss: torch.Tensor | None) -> None:
        """One micro-batch's losses (scalars; `z_loss` already weighted, None without it)."""
        self.loss_sum += loss.detach()
        self.aux_sum += aux_loss.detach()
        if z_loss is not None:
            self.z_sum += z_loss.detach()

    def end_step(self, grad_norm: torch.Tensor | None) -> None:
        """One optimizer step done; `grad_norm` when it was measured."""
        self.steps += 1
        if grad_norm is not None:
            self.grad_norm = grad_norm

    def close(self, grad_accum: int, step: int) -> WindowMeans | str:
        """The window's means, and a new window; the failure reason if its loss is not finite."""
        n = self.steps * grad_accum
        grad_norm = (
            distributed.plain_tensor(self.grad_norm)
            if self.grad_norm is not None
            else self.loss_sum.new_full((), math.nan)
        )
        # Means over ranks: the global batch's losses; the grad norm is the same on every rank.
        window = torch.stack([self.loss_sum, self.aux_sum, self.z_sum, grad_norm])
        loss_sum, aux_sum, z_sum, norm = distributed.mean_across_ranks(window).tolist()
        self.loss_sum.zero_()
        self.aux_sum.zero_()
        self.z_sum.zero_()
        self.steps = 0
        self.grad_norm = None
        loss = loss_sum / n
        if not math.isfinite(loss):
            return f"non-finite train/loss ({loss}) at step {step}"
        return WindowMeans(loss, aux_sum / n, z_sum / n, norm)

    def state_dict(self) -> dict[str, Any]:
        """The sums as means over ranks: each rank adds its own rest of the window on resume."""
        return {
            "loss_sum": distributed.mean_across_ranks(self.loss_sum),
            "aux_sum": distributed.mean_across_ranks(self.aux_sum),
            "z_sum": distributed.mean_across_ranks(self.z_sum),
            "steps": self.steps,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.loss_sum = state["loss_sum"].to(self.device)
        self.aux_sum = state["aux_sum"].to(self.device)
        # checkpoints written before z-loss existed have no z_sum (their runs had none)
        self.z_sum = state.get("z_sum", torch.zeros(())).to(self.device)
        self.steps = state["steps"]
