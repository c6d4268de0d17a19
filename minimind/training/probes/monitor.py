"""What the trainer calls around each optimizer step: the guard on every step, the probes on
every `train.probe_every`-th (docs/diagnostics.md).

    monitor = StepMonitor(model, cfg, evaluation)  # its first validation batch: the probes'
    monitor.begin_step(step)                   # probed steps: the forward probes
    ... forward: monitor.add_loss(out.loss) per micro-batch, backward ...
    grad_norm = monitor.after_backward(step, params)   # guard; gradient probes
    monitor.optimizer_step(optimizer, params)  # unless skipped; update probes
    monitor.log_probes(sink, step)             # after a probed step: one read
    failure = monitor.failure()                # at log steps and before checkpoints

Unprobed steps queue a handful of device operations (the guard) and read nothing back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from minimind.model.lm import MiniMindLM
from minimind.training import distributed
from minimind.training.device import autocast
from minimind.training.evaluation import Evaluation, batch_document_ids
from minimind.training.probes.activations import forward_probes
from minimind.training.probes.groups import ParameterGroups
from minimind.training.probes.guard import TrainingGuard

if TYPE_CHECKING:
    from minimind.spec.sections import TrainConfig
    from minimind.training.metrics import MetricSink

PREFIX = "probe/"
PROBE_ROWS = 4
"""Rows of the fixed validation batch the forward probes run on (a quarter of the default
batch: the probe forward costs about a twelfth of a step)."""
PROBE_QUERIES = 32
"""Query positions per layer whose attention logits and entropy are measured."""


def describe(cfg: TrainConfig) -> str:
    """The dry run's line on the probes and the guard of a `train` section."""
    spike = cfg.spike
    guard = (
        f"spike guard: z > {spike.sigma:g} over the last {spike.window} steps"
        + (", spiking steps skipped (one host sync per step)" if spike.skip else "")
        + "; a non-finite loss or gradient fails the run"
    )
    if cfg.probe_every is None:
        return f"probes: off (train.probe_every); {guard}"
    where = (
        "an eager forward beside the compiled model, which is never hooked"
        if cfg.compile
        else "an extra no-grad forward"
    )
    return (
        f"probes: every {cfg.probe_every} steps under {PREFIX} ({where}, on {PROBE_ROWS} rows "
        f"of the first validation batch); {guard}"
    )


def grad_norms(params: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
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
        evaluation: Evaluation,
    ) -> None:
        """The forward probes measure the first PROBE_ROWS rows of `evaluation`'s first
        validation batch, the same tokens at every probed step (with the run's autocast)."""
        self.model, self.every, self.amp_dtype = model, cfg.probe_every, evaluation.amp_dtype
        self.device = device = evaluation.device
        self.rows = evaluation.val_batches[0][:PROBE_ROWS].to(device)
        with torch.no_grad():  # evaluation tokens: nothing here is ever differentiated
            doc_ids = batch_document_ids(evaluation.data, self.rows)
        self.doc_ids = doc_ids.to(device) if doc_ids is not None else None
        self.groups = ParameterGroups(model, device)
        spike = cfg.spike
        self.guard = TrainingGuard(self.groups, spike.window, spike.sigma, spike.skip, device)
        self._probing = False
        self._losses: list[torch.Tensor] = []
        self._measured: dict[str, torch.Tensor] = {}

    def begin_step(self, step: int) -> None:
        """Before step `step` (1-based) trains: on a probed step, the forward probes."""
        self._probing = self.every is not None and step % self.every == 0
        if self._probing:
            with autocast(self.device, self.amp_dtype):
                self._measured = forward_probes(self.model, self.rows, self.doc_ids, PROBE_QUERIES)

    def add_loss(self, loss: torch.Tensor) -> None:
        """One micro-batch's mean loss (0-dim)."""
        self._losses.append(loss.detach())

    def after_backward(self, step: int, params: Sequence[torch.Tensor]) -> torch.Tensor:
        """The gradients of step `step` are complete: guard them with the step's loss (the
        mean of its micro-batches'), probe them on a probed step; returns their total norm
        (before clipping)."""
        norms, total = grad_norms(params)
        loss = torch.stack(self._losses).mean()
        self._losses = []
        # the global batch's loss, so that every rank scores (and skips) alike
        loss = distributed.mean_across_ranks(loss)
        self.guard.observe(step, loss, norms, distributed.plain_tensor(total))
        if self._probing:
            for row, value in zip(self.groups.rows, self.groups.rms(norms), strict=True):
                self._measured[f"grad_rms/{row}"] = value
        return total

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]
    ) -> None:
        """`optimizer.step()` unless the guard skips this step; on a probed step, the
        update/parameter RMS ratio per group and layer (what the optimizer actually did)."""
        if self.guard.skip_update():
            return
        before = [p.detach().clone() for p in params] if self._probing else []
        optimizer.step()
        if not before:
            return
        after = [p.detach() for p in params]
        delta = torch.stack(torch._foreach_norm(torch._foreach_sub(after, before)))
        weight = torch.stack(torch._foreach_norm(before))
        ratios = (self.groups.sums(delta.pow(2)) / self.groups.sums(weight.pow(2))).sqrt()
        for row, value in zip(self.groups.rows, ratios, strict=True):
            self._measured[f"update_ratio/{row}"] = value

    def log_probes(self, sink: MetricSink, step: int) -> None:
        """After a probed step: its probes under `probe/`, read in one go; else nothing."""
        if not self._probing:
            return
        self._probing = False
        names = list(self._measured)
        values = torch.stack([self._measured[n].float() for n in names]).tolist()
        self._measured = {}
        sink.log_metrics({PREFIX + n: v for n, v in zip(names, values, strict=True)}, step)

    def failure(self) -> str | None:
        """Why the run must stop (the guard's first non-finite loss or gradient), or None."""
        return self.guard.failure()

    def state_dict(self) -> dict[str, Any]:
        return self.guard.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """None (a checkpoint from before the guard): the windows start empty."""
        if state is not None:
            self.guard.load_state_dict(state)
