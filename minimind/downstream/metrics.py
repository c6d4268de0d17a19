"""The downstream tasks' metric names (no torch: the run record and `compare` read them).

`eval/<task>/<measure>`, measures `acc`, `acc_norm`, `acc_centered` (maximized) and `bpb`
(minimized), defined in `minimind.downstream.scoring`.
"""

from __future__ import annotations

EVAL_PREFIX = "eval/"
MEASURES = ("acc", "acc_norm", "acc_centered", "bpb")
MAXIMIZED_MEASURES = frozenset({"acc", "acc_norm", "acc_centered"})


def eval_metric(task: str, measure: str) -> str:
    """The metric of a task's measure: `eval/<task>/<measure>`."""
    return f"{EVAL_PREFIX}{task}/{measure}"


def is_maximized_eval(metric: str) -> bool:
    """Whether `metric` is a downstream accuracy (larger is better)."""
    return metric.startswith(EVAL_PREFIX) and metric.rsplit("/", 1)[-1] in MAXIMIZED_MEASURES
