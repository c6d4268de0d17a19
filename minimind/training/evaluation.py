"""Validation of a model while it trains: the periodic estimate, the exact figure, the downstream
tasks, sample text.

    evaluation = Evaluation(model, forward, data, train_cfg, device, amp_dtype)
    validation = evaluation.validate(step, exact=final)  # `val/*_sampled`, `val/*` when exact,
                                                         # `eval/<task>/*` of `train.evals`
    samples = evaluation.samples(seed)              # continuations of validation prompts

The periodic estimate (`sampled`) scores `train.eval_batches` fixed batches of the held-out split
(the curve); the exact figure scores every held-out token once, at the end of a run (see
docs/architecture.md, 'Measurement rules'). Both return (mean loss in nats per token, bits per
byte), reduced over the ranks of a distributed run. Each set of the suite (`data.eval_sets`) is
scored the same two ways as `val/<name>/*`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from minimind.data import PreparedData, bits_per_byte
from minimind.data.batches import document_ids, exact_val_windows, fixed_val_batches
from minimind.data.splits import HeldOut
from minimind.downstream.metrics import eval_metric
from minimind.downstream.scoring import evaluate_task
from minimind.downstream.tasks import load_task
from minimind.model.generation import SamplingOptions
from minimind.training import distributed
from minimind.training.device import autocast, pins_memory

if TYPE_CHECKING:
    from minimind.model.lm import MiniMindLM
    from minimind.spec.sections import TrainConfig

# Sample generations at the end of a run: prompts cut from the validation split.
SAMPLE_PROMPTS = 3
SAMPLE_PROMPT_TOKENS = 16
SAMPLING = SamplingOptions(temperature=0.8, top_k=50)  # and the tokenizer's EOS


@dataclass
class TextSample:
    prompt: str
    completion: str


def batch_document_ids(data: PreparedData, x: torch.Tensor) -> torch.Tensor | None:
    """The documents of a batch [B, T] for `data.doc_mask` (attention within documents), else
    None."""
    return document_ids(x, data.eos_id) if data.doc_mask else None


@dataclass(frozen=True)
class Validation:
    """One evaluation: the periodic estimate and, at the end of a run, the exact figure, each
    (loss in nats per token, bits per byte)."""

    sampled: tuple[float, float]
    exact: tuple[float, float] | None = None
    downstream: dict[str, float] = field(default_factory=dict)  # `eval/<task>/<measure>`
    # `data.eval_sets`: name -> (sampled, exact or None), each (loss, bits per byte)
    suite: dict[str, tuple[tuple[float, float], tuple[float, float] | None]] = field(
        default_factory=dict
    )

    @property
    def final(self) -> tuple[float, float]:
        """The run's figure so far: the exact one once scored, else the estimate."""
        return self.exact if self.exact is not None else self.sampled

    def failure(self, step: int) -> str | None:
        """Why the run must stop when a validation loss is not finite, else None."""
        for suffix, (loss, _) in self._figures():
            if not math.isfinite(loss):
                return f"non-finite val/loss{suffix} ({loss}) at step {step}"
        return None

    def metrics(self) -> dict[str, float]:
        """`val/loss_sampled`, `val/bpb_sampled`, when exact `val/loss`, `val/bpb`, the
        suite's `val/<name>/{loss,bpb}` likewise with `val/bpb_macro` (their unweighted mean),
        and the downstream tasks' metrics."""
        metrics: dict[str, float] = {}
        for suffix, (loss, bpb) in self._figures():
            metrics[f"val/loss{suffix}"] = loss
            metrics[f"val/bpb{suffix}"] = bpb
        sampled = {name: both[0] for name, both in self.suite.items()}
        exact = {name: both[1] for name, both in self.suite.items() if both[1] is not None}
        for suffix, figures in (("_sampled", sampled), ("", exact)):
            for name, (loss, bpb) in figures.items():
                metrics[f"val/{name}/loss{suffix}"] = loss
                metrics[f"val/{name}/bpb{suffix}"] = bpb
            if figures:
                metrics[f"val/bpb_macro{suffix}"] = math.fsum(
                    bpb for _, bpb in figures.values()
                ) / len(figures)
        return {**metrics, **self.downstream}

    def _figures(self) -> list[tuple[str, tuple[float, float]]]:
        figures = [("_sampled", self.sampled)]
        if self.exact is not None:
            figures.append(("", self.exact))
        return figures


def averaged_metrics(losses: Sequence[float], data: PreparedData) -> dict[str, float]:
    """`val/loss_avg<K>` and `val/bpb_avg<K>` of the last K = len(losses) periodic estimates
    (losses in nats per token; bits per byte is linear in the loss, so the mean's bpb is the
    bpbs' mean): averaging over the final checkpoints lowers the seed-to-seed noise of a run's
    figure ("Signal and Noise", Heineman et al. 2025)."""
    loss = float(np.mean(losses))
    k = len(losses)
    return {
        f"val/loss_avg{k}": loss,
        f"val/bpb_avg{k}": bits_per_byte(loss, len(data.val_tokens), data.val_bytes),
    }


class Evaluation:
    """The held-out scoring of one training run's model.

    `forward` is what the trainer steps with (the model, wrapped for DDP/FSDP and compiled); the
    exact evaluation calls `model` itself, whose tail window would recompile a compiled forward.
    """

    def __init__(
        self,
        model: MiniMindLM,
        forward: Callable[..., Any],
        data: PreparedData,
        cfg: TrainConfig,
        device: torch.device,
        amp_dtype: torch.dtype | None,
    ) -> None:
        self.model = model
        self.forward = forward
        self.data = data
        self.cfg = cfg
        self.device = device
        self.amp_dtype = amp_dtype
        self.val_batches = fixed_val_batches(
            data.val_tokens,
            cfg.batch_size,
            cfg.seq_len,
            cfg.eval_batches,
            pin_memory=pins_memory(device),
        )
        self.tasks = [load_task(task.name, task.path, task.limit) for task in cfg.evals]
        # Each evaluation set with its fixed batches, for `val/<name>/*`.
        self.suite = {
            name: (
                held,
                fixed_val_batches(
                    held.tokens,
                    cfg.batch_size,
                    cfg.seq_len,
                    cfg.eval_batches,
                    name=f"data.eval_sets.{name}",
                    pin_memory=pins_memory(device),
                ),
            )
            for name, held in data.eval_sets.items()
        }

    def validate(self, step: int, exact: bool) -> Validation:
        """The periodic estimate and, when `exact` (the end of the run), the whole held-out
        split; the downstream tasks at the end and every `train.evals_every` steps."""
        sampled = self.sampled()
        every = self.cfg.evals_every
        downstream = exact or every is None or step % every == 0
        suite = {
            name: (
                self.sampled(batches, held),
                self.exact(held) if exact else None,
            )
            for name, (held, batches) in self.suite.items()
        }
        return Validation(
            sampled,
            self.exact() if exact else None,
            self.downstream() if downstream else {},
            suite,
        )

    def downstream(self) -> dict[str, float]:
        """`eval/<task>/<measure>` of every `train.evals` task (`minimind.downstream`). Every
        rank scores every item, so the figures need no reduction (and an FSDP forward, a
        collective, runs on all ranks)."""
        metrics: dict[str, float] = {}
        with autocast(self.device, self.amp_dtype):
            for task in self.tasks:
                scores = evaluate_task(self.model, self.data.tokenizer, task, self.data.eos_id)
                metrics.update({eval_metric(task.name, k): v for k, v in scores.items()})
        return metrics

    def sampled(
        self, val_batches: list[torch.Tensor] | None = None, held: HeldOut | None = None
    ) -> tuple[float, float]:
        """(mean loss in nats per token, bits per byte) over the fixed validation batches, or
        over `val_batches` of the evaluation set `held`."""
        if held is None:
            val_batches, held = self.val_batches, HeldOut(self.data.val_tokens, self.data.val_bytes)
        assert val_batches is not None
        self.model.eval()
        total = torch.zeros((), device=self.device)
        rows = 0
        # DDP: each rank a share, summed below. FSDP: each forward is a collective, so every
        # rank runs every batch and holds the whole sum.
        sharded = distributed.is_sharded(self.model)
        batches = val_batches if sharded else distributed.shard_list(val_batches)
        with torch.no_grad(), autocast(self.device, self.amp_dtype):
            for x in batches:
                x = x.to(self.device, non_blocking=True)
                out = self.forward(
                    x,
                    labels=x,
                    doc_ids=batch_document_ids(self.data, x),
                    loss_chunk_tokens=self.cfg.loss_chunk_tokens,
                )
                total += out.loss.float() * x.size(0)
                rows += x.size(0)
        self.model.train()
        sums = torch.stack([total, total.new_tensor(rows)])
        total_sum, row_sum = (sums if sharded else distributed.sum_across_ranks(sums)).tolist()
        loss = total_sum / row_sum
        return loss, bits_per_byte(loss, len(held.tokens), held.n_bytes)

    def exact(self, held: HeldOut | None = None) -> tuple[float, float]:
        """(mean loss in nats per token, bits per byte) over every token of the held-out split
        (or of the evaluation set `held`) but its first (`exact_val_windows`: non-overlapping
        windows and the tail, each target scored once with the context its window gives it)."""
        if held is None:
            held = HeldOut(self.data.val_tokens, self.data.val_bytes)
        self.model.eval()
        total = 0.0  # summed on the host in float64: the split may hold millions of tokens
        sharded = distributed.is_sharded(self.model)
        windows = exact_val_windows(held.tokens, self.cfg.seq_len, self.cfg.batch_size)
        with torch.no_grad(), autocast(self.device, self.amp_dtype):
            for x, y in windows if sharded else distributed.shard_list(windows):
                x = x.to(self.device)
                logits = self.model(x, doc_ids=batch_document_ids(self.data, x)).logits
                targets = y.to(self.device).flatten()
                total += F.cross_entropy(
                    logits.flatten(0, 1).float(), targets, reduction="sum"
                ).item()
        self.model.train()
        if not sharded and distributed.world_size() > 1:  # (float64 exists on CUDA and CPU)
            summed = torch.tensor(total, dtype=torch.float64, device=self.device)
            total = distributed.sum_across_ranks(summed).item()
        scored = len(held.tokens) - 1
        loss = total / scored
        return loss, bits_per_byte(loss, scored, held.n_bytes)

    def samples(self, seed: int) -> list[TextSample]:
        """Continuations of prompts spread over the validation split (sampling seeded by
        `seed`); none when `train.sample_tokens` is 0."""
        if self.cfg.sample_tokens == 0:
            return []
        val = self.data.val_tokens
        length = min(SAMPLE_PROMPT_TOKENS, len(val), self.model.config.max_seq_len)
        starts = np.linspace(0, len(val) - length, SAMPLE_PROMPTS).astype(np.int64)
        prompts = np.stack([val[s : s + length] for s in starts]).astype(np.int64)
        generator = torch.Generator(self.device).manual_seed(seed)
        with autocast(self.device, self.amp_dtype):
            out = self.model.generate(
                torch.from_numpy(prompts).to(self.device),
                self.cfg.sample_tokens,
                replace(SAMPLING, eos_token_id=self.data.eos_id),
                generator=generator,
            )
        assert isinstance(out, torch.Tensor)  # not streamed: the whole sequences
        decode = self.data.tokenizer.decode
        return [
            TextSample(decode(row[:length].tolist()), decode(row[length:].tolist()))
            for row in out.cpu()
        ]
