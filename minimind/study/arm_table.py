"""The report's table of arms: each arm's training settings as its runs logged them (optimizer,
learning rate, warm-up, schedule, weight decay, steps, tokens per run, parameters) and its
train/val gap at the end of training (`val/loss` − `train/loss`, nats, mean ± sd over seeds).

`train/loss` is the mean over the last log window's training batches, each taken before the
model learned from it, `val/loss` the held-out loss at the end. Once the data repeats, a
positive gap is the model fitting its training text better than unseen text (memorisation);
within one epoch no text repeats, and the gap is how the held-out split (its mix of domains and
documents) differs from the training stream for that model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from minimind.compare import render
from minimind.compare.table import numeric_param
from minimind.study.data_budget import tokens_per_run

SETTINGS = {
    "optimizer": "train.optimizer",
    "lr": "train.optimizer.lr",
    "warm-up": "train.schedule.warmup",
    "schedule": "train.schedule",
    "weight decay": "train.optimizer.weight_decay",
    "steps": "train.steps",
}
"""Header: the param it shows."""
GAP = ("train/loss", "val/loss")
HEADERS = [
    "arm",
    *SETTINGS,
    "tokens/run",
    "params",
    "final train/loss",
    "final val/loss",
    "gap (val − train)",
]


UNSET = {"train.schedule.warmup": "auto"}
"""What a param no run logged means, where its default is derived: a warm-up left unset
follows the run's length (`spec.sections.ScheduleConfig`)."""


def _values(runs: pd.DataFrame, param: str) -> str:
    """The arm's values of `param`, each once ('0.003', or '0.002, 0.004' when its seeds
    differ); where no run logged it, '-' (or `UNSET`'s word)."""
    column = runs.get(f"params.{param}", pd.Series(dtype=object))
    values = list(dict.fromkeys(str(v) for v in column.dropna()))
    return ", ".join(values) or UNSET.get(param, render.MISSING)


def _mean_sd(values: np.ndarray) -> str:
    if len(values) == 0:
        return render.MISSING
    return render.fmt_pm(
        float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else np.nan
    )


def arm_rows(runs: pd.DataFrame) -> list[list[str]]:
    """A row per arm (`HEADERS`) of `runs`, a runs table whose `variant` is the arm's label (as
    `analysis.arm_runs` sets it), in the order of first appearance; only finished runs count
    towards the losses."""
    tokens = tokens_per_run(runs)
    rows = []
    for label in dict.fromkeys(runs["variant"]):
        mine = runs[runs["variant"] == label]
        done = mine[mine["status"] == "FINISHED"]
        train, val = (
            pd.to_numeric(
                done.get(f"metrics.{k}", pd.Series(np.nan, index=done.index)), errors="coerce"
            )
            for k in GAP
        )
        both = train.notna() & val.notna() & np.isfinite(train) & np.isfinite(val)
        params = numeric_param(mine, "num_params")
        rows.append(
            [
                str(label),
                *(_values(mine, p) for p in SETTINGS.values()),
                render.fmt_count(tokens.get(label, np.nan)),
                render.fmt_count(params.max() if params.notna().any() else np.nan),
                _mean_sd(train[both].to_numpy(float)),
                _mean_sd(val[both].to_numpy(float)),
                _mean_sd((val - train)[both].to_numpy(float)),
            ]
        )
    return rows
