"""The compile cache across runs (issue 40), each run a fresh process on one thread, as a run is:

1. the quickstart model's first step (`time/first_step_s`) compiled with a cold cache (an empty
   folder), compiled with the warm cache that cold run left, and eager;
2. the CPU speedrun (`experiments/speedrun_cpu.yaml`, its 107-s budget unless `--speedrun-s`)
   with `train.compile: true` and a warm cache against `compile: false`: steps trained in the
   budget, tokens/s after warm-up and val bpb.

The cases alternate within each of `--rounds` rounds (cold, warm, eager; eager, compiled), so a
busy moment on shared cores slows every case of a round alike. Median and range per case.

    OMP_NUM_THREADS=1 python scripts/probes/compile_cache.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

QUICKSTART = [
    "experiments/quickstart.yaml",
    "train.steps=3",
    "train.schedule.warmup=1",
    "train.eval_every=1000",
    "train.eval_batches=1",
    "train.checkpoint_every=null",
    "train.sample_tokens=0",
]
SPEEDRUN = ["experiments/speedrun_cpu.yaml"]


def child(spec_path: str, overrides: list[str]) -> None:
    """Train the spec's first variant, seed 0, and print what the parent reads as JSON."""
    import torch

    from minimind.data import prepare_data
    from minimind.spec import load_spec
    from minimind.training.device import resolve_run_device
    from minimind.training.trainer import Trainer

    torch.set_num_threads(1)
    points: dict[str, dict[int, float]] = {}

    class Sink:
        def log_metrics(self, metrics: dict[str, float], step: int) -> None:
            for key, value in metrics.items():
                points.setdefault(key, {})[step] = value

        def flush(self, timeout: float | None = None) -> bool:
            return True

    spec = load_spec(spec_path, overrides)
    model_cfg = spec.model_config_obj()
    device = resolve_run_device(spec.train, model_cfg.dim)
    trainer = Trainer(model_cfg, spec.train, prepare_data(spec.data), 0, device)
    outcome = trainer.fit(Sink())
    tokens_per_s = points.get("perf/tokens_per_s", {})
    print(
        json.dumps(
            {
                "first_step_s": points["time/first_step_s"][1],
                "hits": points.get("compile/cache_hits", {1: None})[1],
                "misses": points.get("compile/cache_misses", {1: None})[1],
                "steps": outcome.step,
                "elapsed_s": outcome.elapsed_s,
                "tokens_per_s": tokens_per_s[max(tokens_per_s)] if tokens_per_s else None,
                "val_bpb": outcome.val_bpb,
            }
        )
    )


def run(args: list[str], cache: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MINIMIND_COMPILE_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        sys.exit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} (range {min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--speedrun-s", type=float, default=107.0)
    parser.add_argument("--child", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1:])
        return
    compiled = ["train.compile=true"]
    with tempfile.TemporaryDirectory() as scratch:
        first: dict[str, list[dict]] = {"cold": [], "warm": [], "eager": []}
        for r in range(args.rounds):
            cache = Path(scratch) / f"quickstart-{r}"  # empty: a cold cache
            first["cold"].append(run(QUICKSTART + compiled, cache))
            first["warm"].append(run(QUICKSTART + compiled, cache))
            first["eager"].append(run(QUICKSTART, cache))
            print(f"quickstart round {r}:", {k: v[-1] for k, v in first.items()}, flush=True)
        for case, results in first.items():
            print(
                f"quickstart first step, {case}: {summary([x['first_step_s'] for x in results])} s"
            )

        budget = [f"train.time_limit={args.speedrun_s}"]
        cache = Path(scratch) / "speedrun"
        run(SPEEDRUN + compiled + ["train.time_limit=1"], cache)  # fills the cache, untimed
        speed: dict[str, list[dict]] = {"eager": [], "compiled, warm cache": []}
        for r in range(args.rounds):
            order = list(speed) if r % 2 == 0 else list(reversed(speed))
            for case in order:
                extra = compiled if case != "eager" else []
                speed[case].append(run(SPEEDRUN + budget + extra, cache))
            print(f"speedrun round {r}:", {k: v[-1] for k, v in speed.items()}, flush=True)
        for case, results in speed.items():
            print(f"speedrun {args.speedrun_s:g} s, {case}:")
            for key in ("first_step_s", "steps", "tokens_per_s", "val_bpb"):
                print(f"  {key}: {summary([x[key] for x in results])}")


if __name__ == "__main__":
    main()
