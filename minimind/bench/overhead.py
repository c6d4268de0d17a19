"""overhead suite: the harness's training loop against a bare loop of the same steps.

One `Trainer` of the tiny preset, fp32, batch 16 × 128 (quick: 4 × 64), trains on in every
candidate, 40 steps per round (quick: 10), in 2 × `rounds` rounds. One instance for all, because
two instances of the same model can differ by several percent on their own (where their tensors
happen to lie in memory), which would swamp a 2 % target. The candidates:
- "harness": `Trainer.fit` logging every 10 steps to a real MLflow run (sqlite in a temporary
  directory), with the throughput meter and the progress bar; the run handle is flushed at the
  end of the round, so that the background sender's work is charged to it;
- "no tracking": the same `fit` with a sink that drops the metrics (the loop's own overhead);
- "bare": the same kind of step (model, AdamW, schedule, gradient clipping, batch stream) in a
  plain loop that only trains;
- "bare again": the bare loop once more, whose difference from "bare" (an A/A comparison) is
  the noise floor of the figures on a shared machine.
The probes' rows (`minimind.bench.probe_overhead`) follow, on the study's baseline model.
`fit` ends each round with an evaluation, which is real work and not overhead: its time is
measured and subtracted. Checkpoints, periodic evaluation and samples are off.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from minimind.bench.context import BenchContext
from minimind.bench.results import Row, Target
from minimind.data import DataConfig, prepare_data
from minimind.model.config import ModelConfig
from minimind.spec.sections import TrainConfig
from minimind.training.device import resolve_run_device, synchronize
from minimind.training.timing import alternate, median, paired_ratio
from minimind.training.trainer import MetricSink, Trainer

SUITE = "overhead"
LOG_EVERY = 10
# About 2 s of tiny steps: a round flushes the tracker once, as often as a run's sender delivers
# (`flush_interval_s`, 2 s). Shorter rounds would charge a sqlite transaction more often than a
# run pays one.
ROUND_STEPS = 4 * LOG_EVERY


class NullSink:
    """A `MetricSink` that drops everything: `fit` without tracking."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def flush(self, timeout: float | None = None) -> bool:
        return True


def run(ctx: BenchContext) -> list[Row]:
    from minimind.tracking import Tracker  # mlflow takes seconds to import

    steps, batch, seq = (LOG_EVERY, 4, 64) if ctx.quick else (ROUND_STEPS, 16, 128)
    rounds = ctx.rounds if ctx.quick else 2 * ctx.rounds  # a 2 % target needs more pairs
    device = ctx.device
    data = prepare_data(DataConfig(cache_dir=str(Path(tempfile.gettempdir()) / "minimind-bench")))
    model_cfg = ModelConfig.preset("tiny", vocab_size=data.vocab_size)
    train_cfg = TrainConfig(
        steps=10**9,
        batch_size=batch,
        seq_len=seq,
        precision="fp32",
        device=device.type,  # type: ignore[arg-type]  # str, not the Literal: pydantic checks it
        log_every=LOG_EVERY,
        eval_every=10**9,
        eval_batches=1,
        checkpoint_every=None,
        sample_tokens=0,
    )
    with tempfile.TemporaryDirectory() as tmp:
        tracker = Tracker(f"sqlite:///{tmp}/mlflow.db", "bench-overhead", fallback_dir=tmp)
        with tracker.start_parent("overhead") as handle:
            fp32 = resolve_run_device(train_cfg, model_cfg.dim)  # precision fp32: no autocast
            trainer = Trainer(model_cfg, train_cfg, data, seed=0, device=fp32)
            eval_s: list[float] = []
            evaluation = trainer.evaluation
            # both evaluations (the exact one at the end of each round) are left out
            evaluation.validate = timed(evaluation.validate, eval_s, device)  # type: ignore[method-assign]
            timers = {
                "harness": fit_round(trainer, handle, steps, eval_s),
                "no tracking": fit_round(trainer, NullSink(), steps, eval_s),
                "bare": _bare_round(trainer, steps),
                "bare again": _bare_round(trainer, steps),
            }
            ctx.log(
                f"[overhead] tiny: {steps} steps/round, {len(timers)} candidates x {rounds} rounds"
            )
            times = alternate(timers, rounds, ctx.warmup)

    def ms(name: str) -> str:
        return f"{name} {median(times[name]) / steps * 1e3:,.2f} ms/step"

    case = f"tiny fp32 {batch}x{seq}, {steps} steps/round"
    return [
        Row(
            SUITE,
            f"{case}: Trainer.fit + MLflow vs bare loop",
            100 * (paired_ratio(times["harness"], times["bare"]) - 1.0),
            "%",
            Target("<=", 2.0),
            f"{ms('harness')}; {ms('bare')}; evaluation excluded",
        ),
        Row(
            SUITE,
            f"{case}: Trainer.fit without tracking vs bare loop",
            100 * (paired_ratio(times["no tracking"], times["bare"]) - 1.0),
            "%",
            detail=f"{ms('no tracking')}; the loop's own share of the overhead",
        ),
        Row(
            SUITE,
            f"{case}: bare loop vs bare loop (A/A, noise floor)",
            100 * (paired_ratio(times["bare again"], times["bare"]) - 1.0),
            "%",
            detail=ms("bare again"),
        ),
    ]


def fit_round(
    trainer: Trainer, sink: MetricSink, steps: int, eval_s: list[float]
) -> Callable[[], float]:
    """A timer: `steps` more steps of `trainer.fit(sink)` and a flush, less the evaluation time
    that `trainer.evaluation.validate` (wrapped by `timed`) appends to `eval_s`."""

    def timer() -> float:
        trainer.budget.max_steps = trainer.step + steps
        eval_before = sum(eval_s)
        synchronize(trainer.device)
        start = time.perf_counter()
        trainer.fit(sink)
        sink.flush()
        synchronize(trainer.device)
        return time.perf_counter() - start - (sum(eval_s) - eval_before)

    return timer


def _bare_round(trainer: Trainer, steps: int) -> Callable[[], float]:
    """A timer: `steps` optimizer steps of `trainer`'s model, optimizer, schedule and batches in
    a plain loop, and nothing else."""
    params = list(trainer.model.parameters())
    device, clip = trainer.device, trainer.cfg.grad_clip
    assert clip is not None  # the bench's TrainConfig keeps the default clipping

    def timer() -> float:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            x = next(trainer.batches).to(device, non_blocking=True)
            out = trainer.model(x, labels=x)
            (out.loss + out.aux_loss).backward()
            torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
            trainer.optimizer.step()
            trainer.optimizer.zero_grad(set_to_none=True)
            trainer.scheduler.step()
        synchronize(device)
        return time.perf_counter() - start

    return timer


def timed(fn, seconds: list[float], device: torch.device):
    """`fn` wrapped to append the seconds of each call to `seconds`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        synchronize(device)
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            synchronize(device)
            seconds.append(time.perf_counter() - start)

    return wrapper
