"""Training one variant × seed: the loop, evaluation, checkpoints, resume and sample generations.

    device = resolve_device(spec.train.device)              # minimind.device, once per run
    trainer = Trainer(spec.model_config_obj(), spec.train, data, seed=0, device=device)
    trainer.load_state_dict(load_checkpoint(path))          # only when resuming
    outcome = trainer.fit(run, checkpoint_path=path, run_ids={"child": run.run_id})

The hot path (`_train_step`) queues device work and never reads a value back: losses are summed
into device tensors and read with one `.tolist()` per `log_every` steps, which is also where a
non-finite loss is noticed. Logging, evaluation, checkpoints and the progress display
(`minimind.progress`) happen between steps, so `ThroughputMeter` leaves them out of `perf/*` and
`time/elapsed_s`.

Determinism: the same config and seed give the same weights and losses on the CPU. The seed fixes
the initialisation (each parameter from its own stream of (seed, name): `minimind.initialisation`)
and the batch stream (`TrainBatches` draws batch i from
(seed, rank, i), or from `train.data_seed` when the spec sets it); a checkpoint carries both, so a resumed run continues bit for bit.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from minimind import distributed
from minimind.checkpoint import capture_rng_state, restore_rng_state, save_checkpoint
from minimind.config import ModelConfig
from minimind.data import PreparedData, bits_per_byte
from minimind.data.batches import (
    TrainBatches,
    document_ids,
    exact_val_windows,
    fixed_val_batches,
)
from minimind.device import autocast, autocast_dtype, pins_memory
from minimind.generation import SamplingOptions
from minimind.metrics import (
    ThroughputMeter,
    device_peak_flops,
    load_cv,
    mfu,
    peak_memory_mb,
    reset_peak_memory,
)
from minimind.model import MiniMindLM
from minimind.optim import build_optimizer, build_schedule
from minimind.progress import TrainingProgress, training_progress

if TYPE_CHECKING:
    from minimind.spec.sections import TrainConfig

# Sample generations at the end of a run: prompts cut from the validation split.
SAMPLE_PROMPTS = 3
SAMPLE_PROMPT_TOKENS = 16
SAMPLING = SamplingOptions(temperature=0.8, top_k=50)  # and the tokenizer's EOS


class MetricSink(Protocol):
    """Where a run's metrics go (a `minimind.tracking.RunHandle`)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def flush(self, timeout: float | None = None) -> bool: ...


@dataclass
class Sample:
    prompt: str
    completion: str


@dataclass
class TrainOutcome:
    """How a run ended. `history` holds (step, value) pairs of train/loss and val/loss."""

    status: Literal["FINISHED", "FAILED"]
    step: int
    tokens: int
    elapsed_s: float
    val_loss: float | None = None
    val_bpb: float | None = None
    failure_reason: str | None = None
    samples: list[Sample] = field(default_factory=list)
    history: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # every device's generator


class Trainer:
    """One model, optimizer, schedule and batch stream; `cfg` is the spec's `train` section.

    `device` is the run's device, resolved once by the caller from `cfg.device`
    (`minimind.device.resolve_device`), so that the run's tags and the trainer agree on it.
    """

    def __init__(
        self,
        model_cfg: ModelConfig,
        cfg: TrainConfig,
        data: PreparedData,
        seed: int,
        device: torch.device,
    ) -> None:
        if data.vocab_size > model_cfg.vocab_size:
            raise ValueError(
                f"the tokenizer has {data.vocab_size} tokens, more than model.vocab_size "
                f"({model_cfg.vocab_size})"
            )
        self.cfg = cfg
        self.model_cfg = model_cfg
        self.data = data
        self.seed = seed
        self.device = device
        self.amp_dtype = autocast_dtype(cfg.precision, self.device, model_cfg.dim)
        seed_everything(seed)
        # The run's peak-memory window opens before its model exists and once per run: a reset
        # hands the heap back to the kernel (`minimind.allocator`), which the next step would
        # page-fault in again.
        reset_peak_memory(self.device)
        with self.device:  # parameters and buffers are created on the device, not copied
            self.model = MiniMindLM(model_cfg, init_seed=seed)
        # DDP before compile, as torch recommends; both are the plain model in one process.
        sparse = model_cfg.num_active_params() < model_cfg.num_params()
        wrapped = distributed.wrap_model(self.model, self.device, sparse, cfg.parallel)
        self.forward = torch.compile(wrapped) if cfg.compile else wrapped
        self.optimizer = build_optimizer(self.model, cfg.optimizer)
        # Listed once: walking the module tree every step costs ~100 µs. After `wrap_model`, so
        # under FSDP these are the sharded parameters the optimizer holds (DDP wraps the model
        # without replacing them).
        self._params = list(self.model.parameters())
        self.max_steps = cfg.planned_steps
        # With only a time limit, the schedule's horizon is re-estimated after every step.
        schedule = cfg.resolved_schedule
        self.horizon = self.max_steps or schedule.warmup + 1
        self.scheduler = build_schedule(self.optimizer, schedule, lambda: self.horizon)
        pin = pins_memory(self.device)
        # The batch order: the run's seed unless the spec fixes it (`train.data_seed`).
        data_seed = seed if cfg.data_seed is None else cfg.data_seed
        self.batches = TrainBatches(
            data.train_tokens,
            cfg.batch_size,
            cfg.seq_len,
            data_seed,
            rank=distributed.rank(),
            world=distributed.world_size(),
            doc_starts=data.train_tokens.doc_starts() if data.bos_align else None,
            pin_memory=pin,
        )
        self.val_batches = fixed_val_batches(
            data.val_tokens, cfg.batch_size, cfg.seq_len, cfg.eval_batches, pin_memory=pin
        )
        self.meter = ThroughputMeter(self.device)
        self.flops_per_token = model_cfg.flops_per_token(cfg.seq_len)
        self.step = 0
        self.history: dict[str, list[tuple[int, float]]] = {"train/loss": [], "val/loss": []}
        self._loss_sum = torch.zeros((), device=self.device)
        self._aux_sum = torch.zeros((), device=self.device)
        self._z_sum = torch.zeros((), device=self.device)
        self._window_steps = 0
        self._lr = 0.0
        self._grad_norm: torch.Tensor | None = None
        self._peak_flops: float | None = None
        self._val: tuple[float, float] | None = None

    @property
    def tokens(self) -> int:
        return self.step * self.cfg.tokens_per_step

    # The loop ------------------------------------------------------------------------------

    def fit(
        self,
        sink: MetricSink,
        checkpoint_path: Path | None = None,
        run_ids: Mapping[str, str] | None = None,
        label: str = "",
    ) -> TrainOutcome:
        """Train until the budget is spent or the loss turns non-finite (status FAILED)."""
        cfg = self.cfg
        self.model.train()
        with training_progress(label, self.max_steps, self.step) as progress:
            done = self._budget_spent(self._training_clock())
            while not done:
                log_now = (self.step + 1) % cfg.log_every == 0 or self.step + 1 == self.max_steps
                self.meter.start_step()
                self._train_step(measure_grad_norm=log_now)
                self.meter.end_step(cfg.tokens_per_step)
                self.step += 1
                elapsed = self._training_clock()
                if self.max_steps is None:
                    self._estimate_horizon(elapsed)
                done = self._budget_spent(elapsed)
                progress.advance(self.step)
                evaluate = self.step % cfg.eval_every == 0 or done
                failure = self._report(sink, progress, log_now or done, evaluate, final=done)
                if failure is not None:
                    return self._outcome("FAILED", failure)
                every = cfg.checkpoint_every  # None: no checkpoints at all, not even the last
                if (
                    checkpoint_path is not None
                    and every is not None
                    and (done or self.step % every == 0)
                ):
                    state = self.state_dict(run_ids or {})  # on every rank: it all-reduces
                    if distributed.is_main_process():
                        sink.flush()  # a SIGKILL after the save must not lose steps before it
                        save_checkpoint(checkpoint_path, state)
        # A sharded model's forward is a collective: then every rank generates, in lockstep.
        sample = distributed.is_main_process() or distributed.is_sharded(self.model)
        samples = self.generate_samples() if sample else []
        return self._outcome("FINISHED", samples=samples)

    def _training_clock(self) -> float:
        """Training seconds so far; under a time limit rank 0's clock, so that every rank stops
        at the same step (one broadcast per step, and none without a time limit)."""
        if self.cfg.time_limit is None:
            return self.meter.elapsed_s
        return distributed.main_value(self.meter.elapsed_s)

    def _estimate_horizon(self, elapsed: float) -> None:
        """The steps that fit in the time limit at the pace so far (time-only budgets)."""
        pace = self.step * self.cfg.time_limit / max(elapsed, 1e-9)
        self.horizon = max(self.step + 1, math.ceil(pace))

    def _budget_spent(self, elapsed: float) -> bool:
        if self.max_steps is not None and self.step >= self.max_steps:
            return True
        return self.cfg.time_limit is not None and elapsed >= self.cfg.time_limit

    def _doc_ids(self, x: torch.Tensor) -> torch.Tensor | None:
        """Documents of a batch [B, T] for `data.doc_mask` (attention within documents), else
        None."""
        return document_ids(x, self.data.eos_id) if self.data.doc_mask else None

    def _train_step(self, measure_grad_norm: bool) -> None:
        """One optimizer step over `grad_accum` micro-batches; no host sync."""
        accum = self.cfg.grad_accum
        for micro in range(accum):
            x = next(self.batches).to(self.device, non_blocking=True)  # [B / world_size, T]
            with distributed.gradient_sync(self.forward, micro == accum - 1):
                with autocast(self.device, self.amp_dtype):
                    out = self.forward(
                        x,
                        labels=x,
                        doc_ids=self._doc_ids(x),
                        loss_chunk_tokens=self.cfg.loss_chunk_tokens,
                        with_z_loss=bool(self.cfg.z_loss),
                    )
                objective = out.loss + out.aux_loss
                if self.cfg.z_loss:
                    z = self.cfg.z_loss * out.z_loss
                    objective = objective + z
                    self._z_sum += z.detach()
                (objective / accum).backward()
            self._loss_sum += out.loss.detach()
            self._aux_sum += out.aux_loss.detach()
        self._window_steps += 1
        if self.cfg.grad_clip is not None:
            self._grad_norm = torch.nn.utils.clip_grad_norm_(
                self._params, self.cfg.grad_clip, foreach=True
            )
        elif measure_grad_norm:
            grads = [p.grad for p in self._params if p.grad is not None]
            self._grad_norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        self._lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()

    def _report(
        self,
        sink: MetricSink,
        progress: TrainingProgress,
        train: bool,
        evaluate: bool,
        final: bool = False,
    ) -> str | None:
        """Log this step's training and/or validation metrics in one call (the exact
        evaluation too when `final`); the failure reason if a loss is not finite (nothing is
        logged then)."""
        metrics: dict[str, float] = {}
        failure = self._train_metrics(metrics, progress) if train else None
        if failure is None and evaluate:
            failure = self._val_metrics(metrics, exact=final)
        if failure is None and metrics:
            metrics["train/tokens"] = self.tokens
            metrics["time/elapsed_s"] = self.meter.elapsed_s
            sink.log_metrics(metrics, self.step)
        return failure

    def _train_metrics(self, metrics: dict[str, float], progress: TrainingProgress) -> str | None:
        """Add the window since the last call to `metrics`; the failure reason if its loss is
        not finite."""
        n = self._window_steps * self.cfg.grad_accum
        grad_norm = (
            distributed.plain_tensor(self._grad_norm)
            if self._grad_norm is not None
            else self._loss_sum.new_full((), math.nan)
        )
        # Means over ranks: the global batch's losses; the grad norm is the same on every rank.
        window = torch.stack([self._loss_sum, self._aux_sum, self._z_sum, grad_norm])
        loss_sum, aux_sum, z_sum, norm = distributed.mean_across_ranks(window).tolist()
        self._loss_sum.zero_()
        self._aux_sum.zero_()
        self._z_sum.zero_()
        self._window_steps = 0
        self._grad_norm = None
        loss, aux = loss_sum / n, aux_sum / n
        if not math.isfinite(loss):
            return f"non-finite train/loss ({loss}) at step {self.step}"
        tokens_per_s, step_ms = self.meter.window()
        metrics["train/loss"] = loss
        metrics["train/aux_loss"] = aux
        if self.cfg.z_loss:
            metrics["train/z_loss"] = z_sum / n
        metrics["opt/lr"] = self._lr
        if not math.isnan(norm):  # NaN: not measured (no clipping, and not a planned log step)
            metrics["opt/grad_norm"] = norm
        metrics["sys/peak_mem_mb"] = peak_memory_mb(self.device)
        if not math.isnan(tokens_per_s):  # NaN while only warm-up steps were timed
            if self._peak_flops is None:
                self._peak_flops = device_peak_flops(self.device)
            metrics["perf/tokens_per_s"] = tokens_per_s
            metrics["perf/step_ms"] = step_ms
            per_device = tokens_per_s / distributed.world_size()
            metrics["perf/mfu"] = mfu(per_device, self.flops_per_token, self._peak_flops)
        load = self.model.moe_load()
        if load is not None:
            metrics["moe/load_cv"] = load_cv(load)
        self.history["train/loss"].append((self.step, loss))
        progress.log(self.step, loss, self._lr, tokens_per_s)
        return None

    def _val_metrics(self, metrics: dict[str, float], exact: bool) -> str | None:
        """The periodic estimate as `val/*_sampled` (the curve) and, when `exact`, the whole
        held-out split as `val/loss` and `val/bpb` (docs/architecture.md, 'Measurement rules')."""
        figures = {"_sampled": self.evaluate()}
        if exact:
            figures[""] = self.evaluate_exact()
        for suffix, (loss, bpb) in figures.items():
            if not math.isfinite(loss):
                return f"non-finite val/loss{suffix} ({loss}) at step {self.step}"
            metrics[f"val/loss{suffix}"] = loss
            metrics[f"val/bpb{suffix}"] = bpb
        self.history["val/loss"].append((self.step, figures["_sampled"][0]))
        self._val = figures.get("", figures["_sampled"])
        return None

    def evaluate(self) -> tuple[float, float]:
        """(mean loss in nats per token, bits per byte) over the fixed validation batches."""
        self.model.eval()
        total = torch.zeros((), device=self.device)
        rows = 0
        # DDP: each rank a share, summed below. FSDP: each forward is a collective, so every
        # rank runs every batch and holds the whole sum.
        sharded = distributed.is_sharded(self.model)
        batches = self.val_batches if sharded else distributed.shard_list(self.val_batches)
        with torch.no_grad(), autocast(self.device, self.amp_dtype):
            for x in batches:
                x = x.to(self.device, non_blocking=True)
                out = self.forward(
                    x,
                    labels=x,
                    doc_ids=self._doc_ids(x),
                    loss_chunk_tokens=self.cfg.loss_chunk_tokens,
                )
                total += out.loss.float() * x.size(0)
                rows += x.size(0)
        self.model.train()
        sums = torch.stack([total, total.new_tensor(rows)])
        total, rows = (sums if sharded else distributed.sum_across_ranks(sums)).tolist()
        loss = total / rows
        return loss, bits_per_byte(loss, len(self.data.val_tokens), self.data.val_bytes)

    def evaluate_exact(self) -> tuple[float, float]:
        """(mean loss in nats per token, bits per byte) over every token of the held-out split
        but its first (`exact_val_windows`: non-overlapping windows and the tail, each target
        scored once with the context its window gives it)."""
        self.model.eval()
        total = 0.0  # summed on the host in float64: the split may hold millions of tokens
        sharded = distributed.is_sharded(self.model)
        windows = exact_val_windows(self.data.val_tokens, self.cfg.seq_len, self.cfg.batch_size)
        # The model itself, not the compiled forward: the tail's shape would recompile it.
        with torch.no_grad(), autocast(self.device, self.amp_dtype):
            for x, y in windows if sharded else distributed.shard_list(windows):
                x = x.to(self.device)
                logits = self.model(x, doc_ids=self._doc_ids(x)).logits
                targets = y.to(self.device).flatten()
                total += F.cross_entropy(
                    logits.flatten(0, 1).float(), targets, reduction="sum"
                ).item()
        self.model.train()
        if not sharded and distributed.world_size() > 1:  # (float64 exists on CUDA and CPU)
            summed = torch.tensor(total, dtype=torch.float64, device=self.device)
            total = distributed.sum_across_ranks(summed).item()
        scored = len(self.data.val_tokens) - 1
        loss = total / scored
        return loss, bits_per_byte(loss, scored, self.data.val_bytes)

    def generate_samples(self) -> list[Sample]:
        """Continuations of prompts spread over the validation split (seeded sampling)."""
        if self.cfg.sample_tokens == 0:
            return []
        val = self.data.val_tokens
        length = min(SAMPLE_PROMPT_TOKENS, len(val), self.model_cfg.max_seq_len)
        starts = np.linspace(0, len(val) - length, SAMPLE_PROMPTS).astype(np.int64)
        prompts = np.stack([val[s : s + length] for s in starts]).astype(np.int64)
        generator = torch.Generator(self.device).manual_seed(self.seed)
        with autocast(self.device, self.amp_dtype):
            out = self.model.generate(
                torch.from_numpy(prompts).to(self.device),
                self.cfg.sample_tokens,
                replace(SAMPLING, eos_token_id=self.data.eos_id),
                generator=generator,
            )
        decode = self.data.tokenizer.decode
        return [
            Sample(decode(row[:length].tolist()), decode(row[length:].tolist()))
            for row in out.cpu()
        ]

    def _outcome(self, status: str, reason: str | None = None, samples=()) -> TrainOutcome:
        val_loss, val_bpb = self._val if self._val is not None else (None, None)
        return TrainOutcome(
            status=status,
            step=self.step,
            tokens=self.tokens,
            elapsed_s=self.meter.elapsed_s,
            val_loss=val_loss,
            val_bpb=val_bpb,
            failure_reason=reason,
            samples=list(samples),
            history={k: list(v) for k, v in self.history.items()},
        )

    # Checkpoints ---------------------------------------------------------------------------

    def state_dict(self, run_ids: Mapping[str, str]) -> dict[str, Any]:
        """Everything that determines the rest of the run (weights_only-safe types only)."""
        model_state, optimizer_state = distributed.full_state_dicts(self.model, self.optimizer)
        return {
            "model": model_state,
            "optimizer": optimizer_state,
            "scheduler": self.scheduler.state_dict(),
            "rng": capture_rng_state(),
            "batches": self.batches.state_dict(),
            "meter": self.meter.state_dict(),
            "step": self.step,
            "horizon": self.horizon,
            # Means over ranks: each rank adds its own rest of the window to them on resume.
            "window": {
                "loss_sum": distributed.mean_across_ranks(self._loss_sum),
                "aux_sum": distributed.mean_across_ranks(self._aux_sum),
                "z_sum": distributed.mean_across_ranks(self._z_sum),
                "steps": self._window_steps,
            },
            "val": list(self._val) if self._val is not None else None,
            "history": {k: [list(p) for p in v] for k, v in self.history.items()},
            "run_ids": dict(run_ids),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        distributed.load_full_state_dicts(
            self.model, self.optimizer, state["model"], state["optimizer"]
        )
        self.scheduler.load_state_dict(state["scheduler"])
        restore_rng_state(state["rng"])
        self.batches.load_state_dict(state["batches"])
        self.meter.load_state_dict(state["meter"])
        self.step = state["step"]
        self.horizon = state["horizon"]
        window = state["window"]
        self._loss_sum = window["loss_sum"].to(self.device)
        self._aux_sum = window["aux_sum"].to(self.device)
        # checkpoints written before z-loss existed have no z_sum (their runs had none)
        self._z_sum = window.get("z_sum", torch.zeros(())).to(self.device)
        self._window_steps = window["steps"]
        self._val = tuple(state["val"]) if state["val"] is not None else None
        self.history = {
            k: [(int(s), float(v)) for s, v in pts] for k, pts in state["history"].items()
        }
