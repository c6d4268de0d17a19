"""The spike and NaN guard, run on every optimizer step without reading anything back.

A spike score is a value's distance above the mean of a trailing window of the values before
it, in standard deviations: z = (x - mean) / std (OLMo-core's stability monitor; a spike is
z > `train.spike.sigma`, 6 over 128 steps by default). The loss and the gradient norm (before
clipping) each have a window; between two log steps the guard keeps the largest score and
counts the spikes, logged as `probe/spike/loss`, `probe/spike/grad_norm` and
`probe/spike/count`. With `train.spike.skip` a spiking step does not update the weights (the
OLMo 2 recipe); that decision is read on the host, one synchronisation per step.

A non-finite loss or gradient is recorded on the device at the step it happens, with the first
parameter that went non-finite; the trainer reads it at every log step and before every
checkpoint (`failure`), so a run stops at most `log_every - 1` steps later, naming the step it
happened at, and no checkpoint is ever written after it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from minimind.spec.sections import MIN_SPIKE_WINDOW
from minimind.training.probes.groups import ParameterGroups

MIN_HISTORY = MIN_SPIKE_WINDOW
"""Values a window needs before it scores: the spread of fewer is noise."""

_LOSS, _GRAD = 0, 1
_METRIC_NAMES = {_LOSS: "train/loss", _GRAD: "opt/grad_norm"}


class SpikeWindow:
    """The last `size` values of a metric, on the device, and z-scores against them."""

    def __init__(self, size: int, device: torch.device) -> None:
        self.values = torch.zeros(size, device=device)
        self.count = 0

    def score(self, value: torch.Tensor) -> torch.Tensor:
        """(value - mean) / std of the window so far (0-dim); NaN (not scored) with fewer than
        MIN_HISTORY values."""
        held = min(self.count, self.values.numel())
        if held < MIN_HISTORY:
            return torch.full((), math.nan, device=self.values.device)
        window = self.values[:held]
        std = window.std().clamp_min(torch.finfo(window.dtype).tiny)
        return (value.float() - window.mean()) / std

    def push(self, value: torch.Tensor) -> None:
        self.values[self.count % self.values.numel()] = value.detach().float()
        self.count += 1

    def state_dict(self) -> dict[str, Any]:
        return {"values": self.values.cpu(), "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.values = state["values"].to(self.values.device)
        self.count = state["count"]


class TrainingGuard:
    """Spike scores and the non-finite check of one run; `groups` names the parameters."""

    def __init__(
        self, groups: ParameterGroups, window: int, sigma: float, skip: bool, device: torch.device
    ) -> None:
        self.groups, self.sigma, self.skip, self.device = groups, sigma, skip, device
        self.loss_window = SpikeWindow(window, device)
        self.grad_window = SpikeWindow(window, device)
        self._reset_scores()
        self.spikes = torch.zeros((), device=device)
        self.skipped = 0
        self.first_bad = torch.full(
            (3,), -1, dtype=torch.long, device=device
        )  # step, metric, param
        self._spiked = torch.zeros((), dtype=torch.bool, device=device)

    def _reset_scores(self) -> None:
        # NaN until a step is scored: `fmax` skips NaN, so unscored steps do not count
        self.loss_score = torch.full((), math.nan, device=self.device)
        self.grad_score = torch.full((), math.nan, device=self.device)

    def observe(
        self, step: int, loss: torch.Tensor, norms: torch.Tensor, total: torch.Tensor
    ) -> None:
        """Step `step`'s loss (0-dim), per-parameter gradient norms [n_params] and their total
        norm (0-dim): score loss and total, add them to their windows, and record the first
        non-finite value. No host sync."""
        loss_z, grad_z = self.loss_window.score(loss), self.grad_window.score(total)
        self.loss_window.push(loss)
        self.grad_window.push(total)
        self.loss_score = torch.fmax(self.loss_score, loss_z)
        self.grad_score = torch.fmax(self.grad_score, grad_z)
        self._spiked = (loss_z > self.sigma) | (grad_z > self.sigma)
        self.spikes += self._spiked
        bad_loss, bad_grads = ~torch.isfinite(loss), ~torch.isfinite(norms)
        bad_grad = bad_grads.any()
        metric = torch.where(bad_loss, _LOSS, _GRAD)
        param = torch.where(bad_grad, bad_grads.int().argmax(), -1)  # argmax: the first
        record = torch.stack([torch.full_like(param, step), metric, param])
        first = (self.first_bad[0] < 0) & (bad_loss | bad_grad)
        self.first_bad = torch.where(first, record, self.first_bad)

    def skip_update(self) -> bool:
        """Whether this step's update is skipped (`skip` and a spike): a host read, only when
        `skip` is on."""
        if not self.skip or not bool(self._spiked):
            return False
        self.skipped += 1
        return True

    def failure(self) -> str | None:
        """Why the run must stop (the first non-finite loss or gradient), or None."""
        step, metric, param = self.first_bad.tolist()
        if step < 0:
            return None
        reason = f"non-finite {_METRIC_NAMES[metric]} at step {step}"
        if param >= 0:
            reason += f", first non-finite gradient in {self.groups.describe(param)}"
        return reason

    def metrics(self) -> dict[str, float]:
        """The largest score of each window since the last call (none while the window is too
        short to score) and the spikes so far."""
        loss, grad, spikes = torch.stack([self.loss_score, self.grad_score, self.spikes]).tolist()
        self._reset_scores()
        out = {"probe/spike/count": spikes}
        for name, score in (("loss", loss), ("grad_norm", grad)):
            if math.isfinite(score):
                out[f"probe/spike/{name}"] = score
        if self.skip:
            out["probe/spike/skipped"] = float(self.skipped)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "loss_window": self.loss_window.state_dict(),
            "grad_window": self.grad_window.state_dict(),
            "scores": torch.stack([self.loss_score, self.grad_score, self.spikes]).cpu(),
            "skipped": self.skipped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loss_window.load_state_dict(state["loss_window"])
        self.grad_window.load_state_dict(state["grad_window"])
        self.loss_score, self.grad_score, self.spikes = (
            state["scores"].to(self.device).clone().unbind()
        )
        self.skipped = state["skipped"]
