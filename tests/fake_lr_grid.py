"""An lr grid written straight into an MLflow store: two arms (`norm=rmsnorm`, `norm=layernorm`)
× 3 lrs × 3 seeds with known final losses, one diverged run and one lr run on a single seed, as
a spec with lr variants or an lr sweep's trials logs them: the fixture of the lr sensitivity
tests of `minimind compare` and `minimind study`."""

from __future__ import annotations

import math

from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric

T0 = 1_700_000_000_000
VOCAB = 2048
INITIAL = math.log(VOCAB)  # 7.62
LRS = (1e-3, 3e-3, 1e-2)
# Final val/loss per arm, lr and seed; None: the run diverged (FAILED, a non-finite loss).
LOSS = {
    "norm=rmsnorm": {1e-3: (3.9, 3.8, 4.0), 3e-3: (3.5, 3.6, 3.55), 1e-2: (4.2, None, 4.4)},
    "norm=layernorm": {1e-3: (3.7, 3.75, 3.72), 3e-3: (3.6, 3.58, 3.62), 1e-2: (8.0, 3.9, 3.95)},
}
EXTRA_LR = 3e-2  # run by rmsnorm on seed 0 alone: left out of its grid


def write_lr_grid(
    uri: str,
    experiment: str = "lrs",
    lrs: tuple[float, ...] = LRS,
    seeds: tuple[int, ...] = (0, 1, 2),
    trials: bool = False,
) -> None:
    """`LOSS`'s runs at `lrs` (and `EXTRA_LR` on the first seed), seed k of `LOSS` run as
    `seeds[k]`; with `trials`, tagged as a sweep's trials (`trial_number`), the variant the arm
    alone."""
    client = MlflowClient(uri)
    exp = client.create_experiment(experiment)
    parent = log_parent(client, exp, experiment, T0)
    start = T0
    cells = [(arm, lr, k) for arm in LOSS for lr in lrs for k in range(3)]
    cells.append(("norm=rmsnorm", EXTRA_LR, 0))
    for trial, (arm, lr, k) in enumerate(cells):
        start += 1000
        loss, seed = LOSS[arm].get(lr, (2.0,) * 3)[k], seeds[k]
        norm = arm.split("=")[1]
        params = {"train.optimizer.lr": str(lr), "model.vocab_size": str(VOCAB),
                  "model.norm": norm, "seed": str(seed)}  # fmt: skip
        if loss is None:
            tags = {"failure_reason": "non-finite train/loss (nan) at step 40"}
            metrics, status = [Metric("train/loss", 9.0, 0, 1)], "FAILED"
        else:
            tags, status = {}, "FINISHED"
            metrics = [Metric("val/loss", loss, 0, 100), Metric("val/bpb", loss * 1.6, 0, 100)]
        if trials:
            tags["trial_number"] = str(trial)
        log_child(
            client, exp, parent, arm if trials else f"lr={lr:g},{arm}", seed, start,
            params=params, metrics=metrics, status=status, tags=tags,
        )  # fmt: skip
