"""The probes' rows of the overhead suite: `Trainer.fit` with probes every 10 steps and every
step against probes off, on the axis ablations' decoder (experiments/base.yaml: 4 layers, 128
wide, GQA 4/2, 16 x 128 tokens, the embedded corpus) in fp32, the Shakespeare study's baseline
model (quick: 2 layers, 4 x 64).

One `Trainer` for every candidate, its `train.probe_every` switched between rounds (two
instances of one model can differ by several percent on their own); the guard runs in every
candidate, as it does in every run. Rounds are 40 steps (4 probed steps at every 10), metrics go
to a sink that drops them, and the evaluation `fit` ends each round with is measured and left
out. "off again" against "off" is the A/A noise floor.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from minimind.bench.context import BenchContext
from minimind.bench.overhead import LOG_EVERY, NullSink, fit_round, timed
from minimind.bench.results import Row, Target
from minimind.data import prepare_data
from minimind.spec import load_spec
from minimind.training.device import resolve_run_device
from minimind.training.timing import alternate, median, paired_ratio
from minimind.training.trainer import Trainer

AXIS_BASE = Path(__file__).resolve().parents[2] / "experiments" / "base.yaml"
ROUND_STEPS = 40
CANDIDATES = {"off": None, "every 10": 10, "every step": 1, "off again": None}


def run(ctx: BenchContext) -> list[Row]:
    quick = ["model.n_layers=2", "train.batch_size=4", "train.seq_len=64"] if ctx.quick else []
    spec = load_spec(AXIS_BASE, ["train.precision=fp32", *quick])
    cache = str(Path(tempfile.gettempdir()) / "minimind-bench")
    data = prepare_data(spec.data.model_copy(update={"cache_dir": cache}))
    train_cfg = spec.train.model_copy(
        update={
            "steps": 10**9,
            "device": ctx.device.type,
            "log_every": LOG_EVERY,
            "eval_every": 10**9,
            "eval_batches": 1,
            "checkpoint_every": None,
            "sample_tokens": 0,
        }
    )
    steps = LOG_EVERY if ctx.quick else ROUND_STEPS
    model_cfg = spec.model_config_obj()
    trainer = Trainer(model_cfg, train_cfg, data, 0, resolve_run_device(train_cfg, model_cfg.dim))
    eval_s: list[float] = []
    evaluation = trainer.evaluation
    evaluation.validate = timed(evaluation.validate, eval_s, ctx.device)  # type: ignore[method-assign]
    sink = NullSink()

    def candidate(every: int | None):
        fit = fit_round(trainer, sink, steps, eval_s)

        def timer() -> float:
            trainer.monitor.every = every
            return fit()

        return timer

    timers = {name: candidate(every) for name, every in CANDIDATES.items()}
    rounds = ctx.rounds if ctx.quick else 2 * ctx.rounds
    ctx.log(f"[overhead] probes on study_base: {steps} steps/round, {len(timers)} x {rounds}")
    times = alternate(timers, rounds, ctx.warmup)

    def ms(name: str) -> str:
        return f"{name} {median(times[name]) / steps * 1e3:,.1f} ms/step"

    def overhead(name: str) -> float:
        return 100 * (paired_ratio(times[name], times["off"]) - 1.0)

    case = f"study_base fp32 {train_cfg.batch_size}x{train_cfg.seq_len}, {steps} steps/round"
    return [
        Row(
            "overhead",
            f"{case}: probes every 10 steps vs off",
            overhead("every 10"),
            "%",
            Target("<=", 2.0),
            f"{ms('every 10')}; {ms('off')}; evaluation excluded",
        ),
        Row(
            "overhead",
            f"{case}: probes every step vs off",
            overhead("every step"),
            "%",
            detail=ms("every step"),
        ),
        Row(
            "overhead",
            f"{case}: probes off vs off (A/A, noise floor)",
            overhead("off again"),
            "%",
            detail=ms("off again"),
        ),
    ]
