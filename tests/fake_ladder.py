"""A ladder's runs written straight into an MLflow store, tagged `rung` and `arm` as the runner
tags them, with a known compute multiplier between its two arms: the fixture of the ladder
tests of `minimind compare` and `minimind study`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric

T0 = 1_700_000_000_000
TOKENS_PER_STEP = 8 * 16
RUNG_STEPS = {"r0": 100, "r1": 200, "r2": 400, "r3": 800}
RUNG_FLOPS = {"r0": 1e5, "r1": 2e5, "r2": 4e5, "r3": 8e5}
SEED_EFFICIENCY = {0: 1.0, 1: 0.9, 2: 1.12}  # each seed's compute is worth this much


def baseline_law(compute: np.ndarray) -> np.ndarray:
    return 2.0 + 40.0 * compute**-0.25


def write_ladder(
    uri: str,
    multiplier: Callable[[np.ndarray], np.ndarray | float],
    experiment: str = "lad",
    rungs: tuple[str, ...] = tuple(RUNG_STEPS),
    running: tuple[tuple[str, str], ...] = (),
) -> None:
    """A ladder of `rungs` (of 4) × 3 seeds × 2 arms: the baseline follows `baseline_law` (each
    seed's compute scaled by its efficiency), the variant follows it at `multiplier(C)` × its
    compute, evaluated every 5 steps. The (rung, arm) cells in `running` are still training:
    RUNNING, with no final value yet."""
    client = MlflowClient(uri)
    exp = client.create_experiment(experiment)
    parent = log_parent(client, exp, experiment, T0)
    start = T0 + 1000
    for rung in rungs:
        steps = RUNG_STEPS[rung]
        per_step = TOKENS_PER_STEP * RUNG_FLOPS[rung]
        for arm in ("base", "fast"):
            for seed, efficiency in SEED_EFFICIENCY.items():
                evals = np.arange(5, steps + 1, 5)
                compute = evals * per_step * efficiency
                if arm == "fast":
                    compute = compute * multiplier(evals * per_step)
                values = baseline_law(compute)
                metrics = [Metric("val/bpb_sampled", float(v), 0, int(s)) for s, v in zip(evals, values, strict=True)]  # fmt: skip
                training = (rung, arm) in running
                if not training:
                    metrics.append(Metric("val/bpb", float(values[-1]), 0, steps))
                start += 1000
                log_child(
                    client,
                    exp,
                    parent,
                    f"rung={rung},arm={arm}",
                    seed,
                    start,
                    params={
                        "train.batch_size": "8",
                        "train.seq_len": "16",
                        "train.grad_accum": "1",
                        "train.steps": str(steps),
                        "flops_per_token": str(RUNG_FLOPS[rung]),
                        "num_params": str(int(RUNG_FLOPS[rung] / 6)),
                    },
                    metrics=metrics,
                    status="RUNNING" if training else "FINISHED",
                    tags={"rung": rung, "arm": f"arm={arm}"},
                )
