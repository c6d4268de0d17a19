"""The search space: `sweep.params` mapped onto Optuna's `suggest_*` API and onto a finite grid."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import optuna

from minimind.spec import ParamSpec


def _numeric_range(param: ParamSpec) -> tuple[int | float, int | float]:
    """`(low, high)` of an int or float param (the schema requires both for those types)."""
    assert param.low is not None and param.high is not None, "ParamSpec requires low and high"
    return param.low, param.high


def choices(param: ParamSpec) -> list[Any]:
    """A categorical param's choices (the schema requires them for that type)."""
    assert param.choices is not None, "ParamSpec requires choices for a categorical param"
    return list(param.choices)


def suggest(trial: optuna.Trial, params: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """One value per dotted key, drawn by the trial's sampler; Optuna's param name is the key."""
    values: dict[str, Any] = {}
    for key, p in params.items():
        if p.type == "categorical":
            values[key] = trial.suggest_categorical(key, choices(p))
            continue
        low, high = _numeric_range(p)
        if p.type == "float":
            values[key] = trial.suggest_float(key, low, high, log=p.log, step=p.step)
        else:
            # The schema makes an int param's ends ints and its step a whole number.
            step = int(p.step or 1)
            values[key] = trial.suggest_int(key, int(low), int(high), step=step, log=p.log)
    return values


def grid_values(param: ParamSpec) -> list[Any]:
    """Every value a finite dimension can take: the choices, or the range walked by `step`.

    A float range needs a step (the schema requires one for the grid and brute-force samplers).
    """
    if param.type == "categorical":
        return choices(param)
    low, high = _numeric_range(param)
    step = param.step or 1
    if param.type == "float" and param.step is None:
        raise ValueError("a float range without a step has no finite grid")
    # The tolerance keeps `high` when (high - low) / step is a whole number up to rounding.
    n = math.floor((high - low) / step + 1e-9)
    if param.type == "int":
        return [int(low + i * step) for i in range(n + 1)]
    # min(): 0.1 * 3 is 0.30000000000000004, above a high of 0.3.
    return [min(low + i * step, high) for i in range(n + 1)]


def grid_space(params: Mapping[str, ParamSpec]) -> dict[str, list[Any]]:
    """`{key: values}` for `optuna.samplers.GridSampler`."""
    return {key: grid_values(p) for key, p in params.items()}


def grid_size(params: Mapping[str, ParamSpec]) -> int:
    """How many distinct points a finite search space has."""
    return math.prod(len(values) for values in grid_space(params).values())


def describe_param(param: ParamSpec) -> str:
    """One dimension as the dry run shows it: `float in [0.0003, 0.03], log scale`,
    `int in [0, 40] by 10`, `one of [a, b]`."""
    if param.type == "categorical":
        return f"one of {choices(param)}"
    low, high = _numeric_range(param)
    text = f"{param.type} in [{low:g}, {high:g}]"
    if param.step is not None:
        text += f" by {param.step:g}"
    return text + (", log scale" if param.log else "")


EDGE_SHARE = 0.05
"""A continuous range's best value this close to an end (a share of the range, of its logarithm
for `log` params) counts as on the edge."""


def edge_warnings(params: Mapping[str, ParamSpec], values: Mapping[str, Any]) -> list[str]:
    """One line per numeric param whose chosen value sits on the edge of the searched range: the
    lowest or highest grid point or choice, or within `EDGE_SHARE` of a continuous range's end.
    The optimum may lie beyond it, so the value is the best tried, not a tuned one (a categorical
    param of non-numbers has no edge)."""
    warnings = []
    for key, p in params.items():
        value = values.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if p.type == "categorical":
            numbers = [c for c in p.choices or [] if isinstance(c, int | float)]
            if len(numbers) != len(p.choices or []) or len(numbers) < 3:
                continue  # not an ordered range, or too short to have an inside
            low, high = min(numbers), max(numbers)
            edge = value in (low, high)
        elif p.step is not None or p.type == "int":
            grid = grid_values(p)
            low, high = grid[0], grid[-1]
            edge = len(grid) >= 3 and value in (low, high)
        else:
            low, high = float(p.low), float(p.high)  # type: ignore[arg-type]
            scale = math.log if p.log else float
            share = (scale(value) - scale(low)) / (scale(high) - scale(low))
            edge = min(share, 1 - share) <= EDGE_SHARE
        if edge:
            end = "lowest" if abs(value - low) <= abs(high - value) else "highest"
            warnings.append(
                f"{key} = {value:.4g} is the {end} value searched ([{low:.4g}, {high:.4g}]): "
                "the optimum may lie beyond the range; widen it before calling the value tuned"
            )
    return warnings
