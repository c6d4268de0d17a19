"""The search space: `sweep.params` mapped onto Optuna's `suggest_*` API and onto a finite grid."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import optuna

from minimind.spec import ParamSpec


def suggest(trial: optuna.Trial, params: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """One value per dotted key, drawn by the trial's sampler; Optuna's param name is the key."""
    values: dict[str, Any] = {}
    for key, p in params.items():
        if p.type == "float":
            values[key] = trial.suggest_float(key, p.low, p.high, log=p.log, step=p.step)
        elif p.type == "int":
            values[key] = trial.suggest_int(key, p.low, p.high, step=p.step or 1, log=p.log)
        else:
            values[key] = trial.suggest_categorical(key, p.choices)
    return values


def grid_values(param: ParamSpec) -> list[Any]:
    """Every value a finite dimension can take: the choices, or the range walked by `step`.

    A float range needs a step (the schema requires one for the grid and brute-force samplers).
    """
    if param.type == "categorical":
        return list(param.choices)
    step = param.step or 1
    if param.type == "float" and param.step is None:
        raise ValueError("a float range without a step has no finite grid")
    # The tolerance keeps `high` when (high - low) / step is a whole number up to rounding.
    n = math.floor((param.high - param.low) / step + 1e-9)
    if param.type == "int":
        return [int(param.low + i * step) for i in range(n + 1)]
    # min(): 0.1 * 3 is 0.30000000000000004, above a high of 0.3.
    return [min(param.low + i * step, param.high) for i in range(n + 1)]


def grid_space(params: Mapping[str, ParamSpec]) -> dict[str, list[Any]]:
    """`{key: values}` for `optuna.samplers.GridSampler`."""
    return {key: grid_values(p) for key, p in params.items()}


def grid_size(params: Mapping[str, ParamSpec]) -> int:
    """How many distinct points a finite search space has."""
    return math.prod(len(values) for values in grid_space(params).values())
