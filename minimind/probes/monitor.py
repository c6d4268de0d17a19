"""What the trainer calls around each optimizer step: the guard on every step, the probes on
every `train.probe_every`-th (docs/diagnostics.md).

    monitor = StepMonitor(model, cfg, device, amp_dtype)
    monitor.begin_step(step, x, doc_ids)      # probed steps: the forward probes on x
    ... backward ...
    grad_norm = monitor.after_backward(step, loss, params)   # guard; gradient probes
    if not monitor.skip_update():
        monitor.before_update(params); optimizer.step(); monitor.after_update(params)
    metrics = monitor.probe_metrics()         # after a probed step: one read, else None

Unprobed steps queue a handful of device operations (the guard) and read nothing back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from minimind import distributed
from minimind.device import autocast
from minimind.model import MiniMindLM
from minimind.probes.activations import forward_probes
from minimind.probes.groups import ParameterGroups
from minimind.probes.guard import TrainingGuard

if TYPE_CHECKING:
    from minimind.spec.sections import TrainConfig

PREFIX = "probe/"
PROBE_ROWS = 4
"""Rows of the fixed validation batch the forward probes run on (a quarter of the default
batch: the probe forward costs about a twelfth of a step)."""
PROBE_QUERIES = 32
"""Query positions per layer whose attention logits and entropy are measured."""


def grad_norms(params: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(the L2 norm of each parameter's gradient [n_params], 0 where there is none; their total
    norm, 0-dim). The total is computed as `torch.nn.utils.get_total_norm` computes it, so
    clipping with it gives the bits `clip_grad_norm_` gives (a DTensor under FSDP)."""
    grads = [p.grad for p in params if p.grad is not None]
    present = torch._foreach_norm(grads)
    total = torch.linalg.vector_norm(torch.stack(present))
    found = iter(distributed.plain_tensor(n) for n in present)
    zero = torch.zeros((), device=params[0].device)
    return torch.stack([next(found) if p.grad is not None else zero for p in params]), total


class StepMonitor:
    """The guard and the probes of one run over `model` (the plain `MiniMindLM`)."""

    def __init__(
        self,
        model: MiniMindLM,
        cfg: TrainConfig,
        device: torch.device,
        amp_dtype: torch.dtype | None,
    ) -> None:
        self.model, self.every, self.device, self.amp_dtype = (
            model,
            cfg.probe_every,
            device,
            amp_dtype,
        )
        self.groups = ParameterGroups(model, device)
        spike = cfg.spike
        self.guard = TrainingGuard(self.groups, spike.window, spike.sigma, spike.skip, device)
        self._probing = False
        self._measured: dict[str, torch.Tensor] = {}
        self._before: list[torch.Tensor] = []

    def begin_step(self, step: int, x: torch.Tensor, doc_ids: torch.Tensor | None) -> None:
        """Before step `step` (1-based) trains: on a probed step, the forward probes on x [B, T]
        (its first PROBE_ROWS rows)."""
        self._probing = self.every is not None and step % self.every == 0
        if not self._probing:
            return
        rows = x[:PROBE_ROWS].to(self.device)
        ids = doc_ids[:PROBE_ROWS].to(self.device) if doc_ids is not None else None
        with autocast(self.device, self.amp_dtype):
            self._measured = forward_probes(self.model, rows, ids, PROBE_QUERIES)

    def after_backward(
        self, step: int, loss: torch.Tensor, params: list[torch.Tensor]
    ) -> torch.Tensor:
        """The gradients of step `step` are complete (`loss`: its mean loss, 0-dim): guard them,
        probe them on a probed step; returns their total norm (before clipping)."""
        norms, total = grad_norms(params)
        # the global batch's loss, so that every rank scores (and skips) alike
        plain_total = distributed.plain_tensor(total)
        self.guard.observe(step, distributed.mean_across_ranks(loss.detach()), norms, plain_total)
        if self._probing:
            for row, value in zip(self.groups.rows, self.groups.rms(norms), strict=True):
                self._measured[f"grad_rms/{row}"] = value
        return total

    def skip_update(self) -> bool:
        return self.guard.skip_update()

    def before_update(self, params: list[torch.Tensor]) -> None:
        if self._probing:
            self._before = [p.detach().clone() for p in params]

    def after_update(self, params: list[torch.Tensor]) -> None:
        """Update/parameter RMS ratio per group and layer: what the optimizer actually did."""
        if not self._before:
            return
        after = [p.detach() for p in params]
        delta = torch.stack(torch._foreach_norm(torch._foreach_sub(after, self._before)))
        weight = torch.stack(torch._foreach_norm(self._before))
        ratios = (self.groups.sums(delta.pow(2)) / self.groups.sums(weight.pow(2))).sqrt()
        for row, value in zip(self.groups.rows, ratios, strict=True):
            self._measured[f"update_ratio/{row}"] = value
        self._before = []

    def probe_metrics(self) -> dict[str, float] | None:
        """The last step's probes under `probe/` (one read), or None if it was not probed."""
        if not self._probing:
            return None
        self._probing = False
        names = list(self._measured)
        values = torch.stack([self._measured[n].float() for n in names]).tolist()
        self._measured = {}
        return {PREFIX + name: value for name, value in zip(names, values, strict=True)}

    def state_dict(self) -> dict[str, Any]:
        return self.guard.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.guard.load_state_dict(state)
