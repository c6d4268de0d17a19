"""Training one variant × seed: the loop, its budget, checkpoints and resume.

    device = resolve_run_device(spec.train, model_cfg.dim)  # minimind.training.device, once per run
    trainer = Trainer(model_cfg, spec.train, data, seed=0, device=device)
    trainer.load_state_dict(checkpoint.load())              # only when resuming
    outcome = trainer.fit(run, RunCheckpoint(path, {"child": run.run_id}))

The hot path (`_train_step`) queues device work and never reads a value back: losses are summed
into device tensors (`minimind.training.metric_window`) and read once per `log_every` steps, which is also
where a non-finite loss is noticed. Logging, evaluation (`minimind.training.evaluation`), checkpoints and
the progress display (`minimind.foundations.progress`) happen between steps, so `ThroughputMeter` leaves them
out of `perf/*` and `time/elapsed_s`.

Determinism: the same config and seed give the same weights and losses on the CPU. The seed fixes
the initialisation (each parameter from its own stream of (seed, name, shape):
`minimind.model.initialisation`) and the batch stream (`TrainBatches` draws batch i from (seed, rank, i),
or from `train.data_seed` when the spec sets it); a checkpoint carries both, so a resumed run
continues bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch

from minimind.data import PreparedData
from minimind.data.batches import train_batches
from minimind.foundations.progress import TrainingProgress, training_progress
from minimind.model.config import ModelConfig
from minimind.model.lm import MiniMindLM
from minimind.training import compile_cache, distributed
from minimind.training.budget import TrainingBudget
from minimind.training.checkpoint import capture_rng_state, restore_rng_state, seed_everything
from minimind.training.device import RunDevice, autocast, pins_memory
from minimind.training.evaluation import (
    Evaluation,
    TextSample,
    averaged_metrics,
    batch_document_ids,
)
from minimind.training.metric_window import MetricWindow
from minimind.training.metrics import (
    MetricSink,
    PerfMetrics,
    ThroughputMeter,
    load_cv,
    peak_memory_mb,
    reset_peak_memory,
)
from minimind.training.optim import build_optimizer, build_schedule
from minimind.training.probes import StepMonitor

if TYPE_CHECKING:
    from minimind.spec.sections import TrainConfig


class CheckpointWriter(Protocol):
    """Where a run's checkpoints go (a `minimind.training.checkpoint.RunCheckpoint`)."""

    def save(self, state: Mapping[str, Any]) -> None: ...


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
    samples: list[TextSample] = field(default_factory=list)
    history: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


class Trainer:
    """One model, optimizer, schedule and batch stream; `cfg` is the spec's `train` section.

    `device` is the run's device and autocast dtype, resolved once by the caller from
    `cfg.device` and `cfg.precision` (`minimind.training.device.resolve_run_device`), so that the run's
    tags and the trainer agree on them.
    """

    def __init__(
        self,
        model_cfg: ModelConfig,
        cfg: TrainConfig,
        data: PreparedData,
        seed: int,
        device: RunDevice,
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
        self.device, self.amp_dtype = device.device, device.amp_dtype
        seed_everything(seed)
        # The run's peak-memory window opens before its model exists and once per run: a reset
        # hands the heap back to the kernel (`minimind.training.allocator`), which the next step would
        # page-fault in again.
        reset_peak_memory(self.device)
        with self.device:  # parameters and buffers are created on the device, not copied
            self.model = MiniMindLM(model_cfg, init_seed=seed)
        # DDP before compile, as torch recommends; both are the plain model in one process.
        sparse = model_cfg.num_active_params() < model_cfg.num_params()
        wrapped = distributed.wrap_model(self.model, self.device, sparse, cfg.parallel)
        if cfg.compile:  # graphs an earlier run of this shape compiled are loaded, not compiled
            compile_cache.use_compile_cache()
        self.forward = torch.compile(wrapped) if cfg.compile else wrapped
        self.optimizer = build_optimizer(self.model, cfg.optimizer)
        # Listed once: walking the module tree every step costs ~100 µs. After `wrap_model`, so
        # under FSDP these are the sharded parameters the optimizer holds (DDP wraps the model
        # without replacing them).
        self._params = list(self.model.parameters())
        schedule = cfg.resolved_schedule
        self.budget = TrainingBudget(cfg.planned_steps, cfg.time_limit, cfg.warmup_steps)
        self.scheduler = build_schedule(self.optimizer, schedule, lambda: self.budget.horizon)
        # The batch order: the run's seed unless the spec fixes it (`train.data_seed`).
        data_seed = seed if cfg.data_seed is None else cfg.data_seed
        self.batches = train_batches(
            data,
            cfg.batch_size,
            cfg.seq_len,
            data_seed,
            rank=distributed.rank(),
            world=distributed.world_size(),
            pin_memory=pins_memory(self.device),
        )
        self.evaluation = Evaluation(
            self.model, self.forward, data, cfg, self.device, self.amp_dtype
        )
        self.monitor = StepMonitor(self.model, cfg, self.evaluation)
        self.meter = ThroughputMeter(self.device)
        flops_per_token = model_cfg.flops_per_token(cfg.seq_len)
        self.perf = PerfMetrics(self.device, flops_per_token, distributed.world_size())
        self.step = 0
        self.history: dict[str, list[tuple[int, float]]] = {"train/loss": [], "val/loss": []}
        self.window = MetricWindow(self.device)
        self._lr = 0.0
        self._val: tuple[float, float] | None = None

    @property
    def tokens(self) -> int:
        return self.step * self.cfg.tokens_per_step

    # The loop ------------------------------------------------------------------------------

    def fit(
        self,
        sink: MetricSink,
        checkpoint: CheckpointWriter | None = None,
        label: str = "",
        forks: Mapping[int, CheckpointWriter] | None = None,
    ) -> TrainOutcome:
        """Train until the budget is spent or the loss turns non-finite (status FAILED),
        saving to `checkpoint` every `train.checkpoint_every` steps and at the end, and the
        whole state to `forks[step]` once `step` steps are done (where budget branches start:
        `start_branch`)."""
        cfg, budget, quiet = self.cfg, self.budget, not distributed.is_main_process()
        every = cfg.checkpoint_every  # None: no checkpoints at all, not even the last
        self.model.train()
        first_step = True  # this process's: it compiles, or loads what an earlier run compiled
        compiled = compile_cache.cache_counts() if cfg.compile else None  # before that step
        with training_progress(label, budget.max_steps, self.step, quiet=quiet) as progress:
            done = budget.spent(self.step, self._training_clock())
            while not done:
                log_now = (self.step + 1) % cfg.log_every == 0 or self.step + 1 == budget.max_steps
                self.meter.start_step()
                self._train_step()
                step_ms = self.meter.end_step(cfg.tokens_per_step)
                self.step += 1
                if first_step:
                    sink.log_metrics(self._first_step_metrics(step_ms, compiled), self.step)
                    first_step = False
                done = budget.advance(self.step, self._training_clock())
                progress.advance(self.step)
                self.monitor.log_probes(sink, self.step)
                save = every is not None and (done or self.step % every == 0)
                # the guard's record of a non-finite step is read before any checkpoint
                failure = self.monitor.failure() if log_now or done or save else None
                evaluate = self.step % cfg.eval_every == 0 or done
                failure = failure or self._report(sink, progress, log_now or done, evaluate, done)
                if failure is not None:
                    return self._outcome("FAILED", failure)
                # a fork before the checkpoint: a run resumed from this step has saved its fork
                if forks is not None and self.step in forks:
                    state = self.state_dict()
                    if distributed.is_main_process():
                        forks[self.step].save(state)
                if checkpoint is not None and save:
                    state = self.state_dict()  # on every rank: it all-reduces
                    if distributed.is_main_process():
                        sink.flush()  # a SIGKILL after the save must not lose steps before it
                        checkpoint.save(state)
        # A sharded model's forward is a collective: then every rank generates, in lockstep.
        sample = distributed.is_main_process() or distributed.is_sharded(self.model)
        samples = self.evaluation.samples(self.seed) if sample else []
        return self._outcome("FINISHED", samples=samples)

    def step_once(self) -> None:
        """One optimizer step outside `fit`, as `minimind study bench` times an arm: no
        logging, evaluation, checkpoint, budget or progress."""
        self._train_step()
        self.step += 1

    def _training_clock(self) -> float:
        """Training seconds so far; under a time limit rank 0's clock, so that every rank stops
        at the same step (one broadcast per step, and none without a time limit)."""
        if self.cfg.time_limit is None:
            return self.meter.elapsed_s
        return distributed.main_value(self.meter.elapsed_s)

    def _train_step(self) -> None:
        """One optimizer step over `grad_accum` micro-batches; no host sync off probed steps."""
        accum = self.cfg.grad_accum
        self.monitor.begin_step(self.step + 1)
        for micro in range(accum):
            x = next(self.batches).to(self.device, non_blocking=True)  # [B / world_size, T]
            with distributed.gradient_sync(self.forward, micro == accum - 1):
                with autocast(self.device, self.amp_dtype):
                    out = self.forward(
                        x,
                        labels=x,
                        doc_ids=batch_document_ids(self.data, x),
                        loss_chunk_tokens=self.cfg.loss_chunk_tokens,
                        with_z_loss=bool(self.cfg.z_loss),
                    )
                objective = out.loss + out.aux_loss
                z = self.cfg.z_loss * out.z_loss if self.cfg.z_loss else None
                if z is not None:
                    objective = objective + z
                (objective / accum).backward()
            self.window.add(out.loss, out.aux_loss, z)
            self.monitor.add_loss(out.loss)
        grad_norm = self.monitor.after_backward(self.step + 1, self._params)
        if self.cfg.grad_clip is not None:  # with the guard's norm: clip_grad_norm_'s bits
            clip = torch.nn.utils.clip_grads_with_norm_
            clip(self._params, self.cfg.grad_clip, grad_norm, foreach=True)
        self.window.end_step(grad_norm)
        self._lr = self.optimizer.param_groups[0]["lr"]
        self.monitor.optimizer_step(self.optimizer, self._params)
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
            validation = self.evaluation.validate(self.step, exact=final)
            failure = validation.failure(self.step)
            if failure is None:
                metrics.update(validation.metrics())
                self.history["val/loss"].append((self.step, validation.sampled[0]))
                self._val = validation.final
                metrics.update(self._averaged_validation() if final else {})
        if failure is None and metrics:
            metrics["train/tokens"] = self.tokens
            metrics.update(self.batches.source_metrics())  # a mixture's tokens and epochs
            metrics["time/elapsed_s"] = self.meter.elapsed_s
            sink.log_metrics(metrics, self.step)
        return failure

    @staticmethod
    def _first_step_metrics(step_ms: float, before: dict[str, int] | None) -> dict[str, float]:
        """`time/first_step_s`, the first step's seconds in this process (compiling included),
        and, for a compiled model, the graphs that step compiled (`compile/cache_misses`) and
        loaded from the compile cache (`compile/cache_hits`; `before`: the counts before it)."""
        metrics = {"time/first_step_s": step_ms / 1e3}
        if before is not None:
            after = compile_cache.cache_counts()
            metrics.update({f"compile/cache_{k}": after[k] - before[k] for k in before})
        return metrics

    def _averaged_validation(self) -> dict[str, float]:
        """The mean of the last `train.eval_average_last` periodic estimates (from the history a
        checkpoint carries, so a resumed run averages the same ones); nothing when unset or when
        a run bounded by time alone evaluated fewer times."""
        k, estimates = self.cfg.eval_average_last, self.history["val/loss"]
        if k is None or len(estimates) < k:
            return {}
        return averaged_metrics([loss for _, loss in estimates[-k:]], self.data)

    def _train_metrics(self, metrics: dict[str, float], progress: TrainingProgress) -> str | None:
        """Add the window since the last call to `metrics`; the failure reason if its loss is
        not finite."""
        means = self.window.close(self.cfg.grad_accum, self.step)
        if isinstance(means, str):
            return means
        tokens_per_s, step_ms = self.meter.window()
        metrics.update(means.metrics(with_z_loss=bool(self.cfg.z_loss)))
        metrics.update(self.monitor.guard.metrics())
        metrics["opt/lr"] = self._lr
        metrics["sys/peak_mem_mb"] = peak_memory_mb(self.device)
        metrics.update(self.perf.of(tokens_per_s, step_ms))
        load = self.model.moe_load()
        if load is not None:
            metrics["moe/load_cv"] = load_cv(load)
        self.history["train/loss"].append((self.step, means.loss))
        progress.log(self.step, means.loss, self._lr, tokens_per_s)
        return None

    def _outcome(
        self, status: Literal["FINISHED", "FAILED"], reason: str | None = None, samples=()
    ) -> TrainOutcome:
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

    def state_dict(self) -> dict[str, Any]:
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
            "horizon": self.budget.horizon,
            "window": self.window.state_dict(),
            "val": list(self._val) if self._val is not None else None,
            "history": {k: [list(p) for p in v] for k, v in self.history.items()},
            "guard": self.monitor.state_dict(),
        }

    def start_branch(self, state: Mapping[str, Any]) -> None:
        """Continue a longer wsd run's state (`fit`'s `forks`, saved at or before this run's
        decay start) as this run: its own budget is the schedule's horizon from here on, so
        the steps left decay as a plain run of this budget's would, bit for bit."""
        self.load_state_dict(state)
        assert self.budget.max_steps is not None  # branches are budgets of steps
        self.budget.horizon = self.budget.max_steps

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state_dict()`'s output (other keys, such as a checkpoint's owner,
        are left to whoever wrote them)."""
        distributed.load_full_state_dicts(
            self.model, self.optimizer, state["model"], state["optimizer"]
        )
        self.scheduler.load_state_dict(state["scheduler"])
        restore_rng_state(state["rng"])
        self.batches.load_state_dict(state["batches"])
        self.meter.load_state_dict(state["meter"])
        self.step = state["step"]
        self.budget.horizon = state["horizon"]
        self.window.load_state_dict(state["window"])
        self._val = tuple(state["val"]) if state["val"] is not None else None
        self.history = {
            k: [(int(s), float(v)) for s, v in pts] for k, pts in state["history"].items()
        }
        self.monitor.load_state_dict(state.get("guard"))
