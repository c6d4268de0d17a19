"""The `ablate:` section: axes, their structure, and the Cartesian product of their values.

An axis is either
- a dotted spec key with its values: `model.norm: [layernorm, rmsnorm]`, or
- a group: a name without dots whose values each set several keys together, for a paired
  comparison such as `arch: [{model.norm: rmsnorm, model.position: rope},
  {model.norm: layernorm, model.position: sinusoidal}]` (two variants, not four).

Each combination of one value per axis is a variant; its assignments map dotted keys to values.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from minimind.data.config import DataConfig
from minimind.foundations.strict_config import field_error
from minimind.model.config import ModelConfig
from minimind.spec.errors import did_you_mean, keys_at, show, takes_extra_keys
from minimind.spec.sections import TrainConfig

# Sections whose fields an ablation or a sweep may vary.
VARIABLE_SECTIONS: dict[str, type[BaseModel]] = {"data": DataConfig, "train": TrainConfig}
_GROUP = re.compile(r"[A-Za-z_]\w*")


def is_group(axis: str) -> bool:
    return "." not in axis


def axis_options(axis: str, values: list[Any]) -> list[dict[str, Any]]:
    """The assignments each value of one axis makes."""
    return [dict(v) for v in values] if is_group(axis) else [{axis: v} for v in values]


def ablation_grid(ablate: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination, axes in order and values in list order; `[{}]` without axes."""
    axes = [axis_options(axis, values) for axis, values in ablate.items()]
    return [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*axes)]


def ablated_keys(ablate: Mapping[str, list[Any]]) -> dict[str, str]:
    """Each dotted key some axis varies -> that axis."""
    return {
        key: axis
        for axis, values in ablate.items()
        for o in axis_options(axis, values)
        for key in o
    }


def check_axes(ablate: Mapping[str, list[Any]]) -> None:
    """Structural checks (run inside a validator; paths are relative to `ablate`)."""
    owner: dict[str, str] = {}
    for axis, values in ablate.items():
        if is_group(axis):
            if not _GROUP.fullmatch(axis):
                field_error((axis,), "a group axis is named by a word without dots")
            for i, value in enumerate(values):
                if not isinstance(value, dict) or not value:
                    field_error(
                        (axis, i),
                        "a group axis takes mappings of dotted keys to values, e.g. "
                        "{model.norm: rmsnorm, model.position: rope}; a single key is written "
                        "model.norm: [...]",
                    )
                for key in value:
                    problem = key_problem(str(key))
                    if problem:
                        field_error((axis, i, str(key)), problem)
        else:
            problem = key_problem(axis)
            if problem:
                field_error((axis,), problem)
        seen = [json.dumps(v, sort_keys=True, default=str) for v in values]
        for i, value in enumerate(seen):
            if value in seen[:i]:
                field_error((axis, i), f"duplicate value {show(values[i])}")
        for key in {k for o in axis_options(axis, values) for k in o}:
            if key in owner:
                field_error((axis,), f"{key} is also varied by ablate.{owner[key]}")
            owner[key] = axis


def key_problem(key: str) -> str | None:
    """Why `key` cannot be ablated or searched, or None. Options of model components are left
    to validation, which knows each component's options."""
    parts = key.split(".")
    if len(parts) < 2 or (parts[0] != "model" and parts[0] not in VARIABLE_SECTIONS):
        return "can only vary keys under model, data or train (e.g. model.norm)"
    if parts[0] == "model":
        known = ["preset", *ModelConfig.model_fields]
        return None if parts[1] in known else _unknown(parts[1], known)
    section = VARIABLE_SECTIONS[parts[0]]
    for depth in range(1, len(parts)):
        known = keys_at(section, tuple(parts[1:depth]))
        if not known or (
            parts[depth] not in known and takes_extra_keys(section, tuple(parts[1:depth]))
        ):
            return None
        if parts[depth] not in known:
            return _unknown(parts[depth], known)
    return None


def place(
    targets: Mapping[str, str], fallback: str, path: str, message: str
) -> tuple[tuple[str], str]:
    """Where to report a variant's problem at `path`: `targets` maps each varied key to where it
    is written in the spec; a problem elsewhere goes to `fallback` with its path in the text."""
    for key, where in targets.items():
        if path == key or path.startswith((key + ".", key + "[")):
            return (where + path[len(key) :],), message
    return (fallback,), f"{path}: {message}"


def _unknown(key: str, known: list[str]) -> str:
    return f"unknown key {key!r}; choices: {', '.join(sorted(known))}{did_you_mean(key, known)}"
