"""A synthetic MLflow store written with the tags of `minimind.record`, for the tests of
`minimind compare`: its values are chosen so that every aggregate can be computed by hand (see
`EXPECTED`)."""

from __future__ import annotations

import pandas as pd
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric

from minimind.cli import main

T0 = 1_700_000_000_000  # ms; start times are spaced by a second so that run order is known


LN = "model.norm=layernorm"


RMS = "model.norm=rmsnorm"
# Final val/bpb and val/loss per seed (0, 1, 2).


FINAL_BPB = {LN: [2.10, 2.20, 2.15], RMS: [2.00, 2.02, 2.04]}


FINAL_LOSS = {LN: [1.40, 1.50, 1.45], RMS: [1.30, 1.32, 1.34]}
# val/bpb at the mid-training eval (step 5); layernorm seed 0 is better there than at the end.


MID_BPB = {LN: [2.05, 2.60, 2.60], RMS: [2.50, 2.50, 2.50]}


THROUGHPUT = {LN: [100.0, 200.0, 300.0, 1000.0], RMS: [500.0, 600.0, 700.0]}  # + 10·seed


EXPECTED = {
    LN: {
        "n": 3,
        "val/bpb_mean": 2.15,
        "val/bpb_std": 0.05,
        "val/loss_mean": 1.45,
        "val/loss_std": 0.05,
        "val/bpb_best": 2.05,
        "perf/tokens_per_s_median": 260.0,  # per-seed medians 250, 260, 270
        "sys/peak_mem_mb_max": 102.0,
        "wall_s_mean": 31.0,
        "perf/mfu_median": 0.02,
    },
    RMS: {
        "n": 3,
        "val/bpb_mean": 2.02,
        "val/bpb_std": 0.02,
        "val/loss_mean": 1.32,
        "val/loss_std": 0.02,
        "val/bpb_best": 2.00,
        "perf/tokens_per_s_median": 610.0,  # per-seed medians 600, 610, 620
        "sys/peak_mem_mb_max": 102.0,
        "wall_s_mean": 31.0,
        "perf/mfu_median": 0.02,
    },
}


STEPS = 10


def norm_curves(variant: str, seed: int, start: int) -> list[Metric]:
    """Histories as the runner logs them: train metrics every step, evals at steps 5 and 10."""
    ts = lambda step: start + 1000 * step  # noqa: E731
    out = []
    for step in range(1, STEPS + 1):
        out += [
            Metric("train/loss", 3.0 - 0.1 * step + 0.01 * seed, ts(step), step),
            Metric("train/tokens", 1024.0 * step, ts(step), step),
            Metric("time/elapsed_s", (30.0 + seed) * step / STEPS, ts(step), step),
            Metric("opt/lr", 1e-3, ts(step), step),
        ]
    for i, value in enumerate(THROUGHPUT[variant]):
        out.append(Metric("perf/tokens_per_s", value + 10 * seed, ts(i + 1), i + 1))
    out += [Metric("perf/mfu", v, ts(i + 1), i + 1) for i, v in enumerate([0.01, 0.02, 0.03])]
    out += [Metric("sys/peak_mem_mb", 90.0 + seed, ts(1), 1)]
    out += [Metric("sys/peak_mem_mb", 100.0 + seed, ts(STEPS), STEPS)]
    out += [
        Metric("val/bpb", MID_BPB[variant][seed], ts(5), 5),
        Metric("val/bpb", FINAL_BPB[variant][seed], ts(STEPS), STEPS),
        Metric("val/loss", FINAL_LOSS[variant][seed] + 0.3, ts(5), 5),
        Metric("val/loss", FINAL_LOSS[variant][seed], ts(STEPS), STEPS),
    ]
    return out


def norm_params(variant: str, seed: int) -> dict[str, str]:
    return {
        "name": "norm",
        "model.norm": variant.split("=")[1],
        "model.dim": "64",
        "train.steps": str(STEPS),
        "train.device": "cpu",
        "num_params": "123456",
        "num_active_params": "123456",
        "flops_per_token": "740736",
        "seeds": "[0, 1, 2]",
    }


def row_of(comparison, variant: str) -> pd.Series:
    table = comparison.table
    return table[table["variant"] == variant].iloc[0]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["compare", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def two_invocations(mlflow_uri: str) -> tuple[str, str]:
    """Experiment `pick`: an invocation of spec 1111aaaa (variants a and b, 2 seeds), then a
    later one of spec 9999bbbb, killed after one run of variant c."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("pick")
    first = log_parent(client, exp, "pick", T0)
    later = log_parent(client, exp, "pick", T0 + 10_000)
    client.set_tag(first, "spec_hash", "1111aaaa2222")
    client.set_tag(later, "spec_hash", "9999bbbb0000")
    client.set_terminated(later, "KILLED")
    params = {"name": "pick", "train.steps": "10"}
    for k, (variant, seed) in enumerate([("a", 0), ("a", 1), ("b", 0), ("b", 1)]):
        metrics = [Metric("val/bpb", 2.0 + 0.1 * k, T0 + 2000, 10)]
        log_child(client, exp, first, variant, seed, T0 + 1000 * (k + 1), params=params,
                  metrics=metrics)  # fmt: skip
    metrics = [Metric("val/bpb", 3.0, T0 + 12_000, 10)]
    log_child(client, exp, later, "c", 0, T0 + 11_000, params=params, metrics=metrics)
    return first, later
