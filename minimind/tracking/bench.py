"""Benchmark of the tracking overhead: `python -m minimind.tracking.bench [--log-every N]`.

Prints (1) the caller's cost of one `RunHandle.log_metrics` call with 8 metrics, (2) the wall time
the delivery thread needs per metric point (MLflow's sqlite store), and (3) the slowdown of a
~25 ms synthetic training step that logs 8 metrics every `--log-every` steps. (3) is measured side
by side in one process, alternating bare and logging blocks so that machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import torch

from minimind.tracking.tracker import Tracker

METRICS = (
    "train/loss",
    "train/aux_loss",
    "opt/lr",
    "opt/grad_norm",
    "perf/tokens_per_s",
    "perf/step_ms",
    "train/tokens",
    "time/elapsed_s",
)


def _best_per_call_s(fn, calls: int, repeats: int = 5) -> float:
    """The fastest of `repeats` timings of `calls` calls, per call (the intrinsic cost)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for step in range(calls):
            fn(step)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def _calibrated_step(target_s: float) -> tuple[torch.Tensor, int]:
    """A matrix and a matmul count whose repetition takes about `target_s` on this machine."""
    x = torch.randn(256, 256)
    per_matmul = _best_per_call_s(lambda _: x @ x, calls=10, repeats=7)
    return x, max(1, round(target_s / per_matmul))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=100, help="steps per block (4 bare and 4 logging blocks)"
    )
    parser.add_argument("--step-ms", type=float, default=25.0)
    parser.add_argument("--log-every", type=int, default=10, help="steps between log calls")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # steadier timings on a shared machine; the ratio is what counts

    with tempfile.TemporaryDirectory() as tmp:
        tracker = Tracker(
            f"sqlite:///{Path(tmp) / 'mlflow.db'}", "bench", fallback_dir=Path(tmp) / "fb"
        )
        run = tracker.start_child("bench-parent", "bench")

        values = [0.5] * len(METRICS)
        step = 0
        # The caller's cost: 400 calls stay below the sender's wake-up threshold, and the flush
        # after each timing empties the queue, so the delivery thread does not compete for the
        # GIL while the caller is timed. The flushes time the delivery thread's own work.
        build_s = _best_per_call_s(lambda _: dict(zip(METRICS, values, strict=True)), 400, 20)
        call_s = math.inf
        deliver_s = 0.0
        for _ in range(20):
            start = time.perf_counter()
            for _ in range(400):
                step += 1
                run.log_metrics(dict(zip(METRICS, values, strict=True)), step)
            call_s = min(call_s, (time.perf_counter() - start) / 400)
            start = time.perf_counter()
            run.flush()
            deliver_s += time.perf_counter() - start
        print(f"caller: {(call_s - build_s) * 1e6:.2f} us per log_metrics call of 8 metrics")
        points = 20 * 400 * len(METRICS)
        print(
            f"delivery thread (sqlite): {deliver_s / points * 1e6:.1f} us wall time per metric point"
        )

        x, matmuls = _calibrated_step(args.step_ms / 1e3)
        bare: list[float] = []
        logged: list[float] = []
        for _block in range(4):
            for logging in (False, True):
                for _ in range(args.steps):
                    start = time.perf_counter()
                    for _ in range(matmuls):
                        x @ x
                    step += 1
                    if logging and step % args.log_every == 0:
                        run.log_metrics(dict(zip(METRICS, values, strict=True)), step)
                    (logged if logging else bare).append(time.perf_counter() - start)
        run.end()
        bare_ms = sum(bare) / len(bare) * 1e3
        logged_ms = sum(logged) / len(logged) * 1e3
        print(
            f"mean step: bare {bare_ms:.2f} ms, logging every {args.log_every} steps "
            f"{logged_ms:.2f} ms ({(logged_ms / bare_ms - 1) * 100:+.2f}%; {len(bare)} steps each)"
        )


if __name__ == "__main__":
    main()
