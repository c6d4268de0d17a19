"""Readable variant names that are safe as MLflow run names and as directory names.

`{"model.norm": "rmsnorm", "model.position": {"name": "rope", "style": "gptj"}}` is named
`norm=rmsnorm,position=rope(style=gptj)`; keys are shortened to their shortest unique suffix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

BASE_VARIANT = "base"

_UNSAFE = re.compile(r"[^A-Za-z0-9_.=,()+\-\[\]]")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def check_name(name: str) -> str:
    """`name` if it is safe as an MLflow experiment name and as one directory name (no '/', no
    '..'); else `ValueError`. Spec names and experiment names are both used as such."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(
            f"must be 1-100 letters, digits, '_', '.' or '-' starting with a letter or "
            f"digit (it names MLflow experiments and directories), got {name!r}"
        )
    return name


def variant_name(assignments: Mapping[str, Any]) -> str:
    """The name of the variant that sets each dotted key to its value; `base` for none."""
    if not assignments:
        return BASE_VARIANT
    labels = shortest_unique_suffixes(list(assignments))
    return ",".join(f"{labels[key]}={render(value)}" for key, value in assignments.items())


def shortest_unique_suffixes(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key's shortest suffix that no other key ends with."""
    labels = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            label = ".".join(parts[-n:])
            if not any(o != key and (o == label or o.endswith("." + label)) for o in keys):
                break
        labels[key] = label
    return labels


def render(value: Any) -> str:
    """A compact, path-safe rendering of an ablation value."""
    return _UNSAFE.sub("_", _render(value))


def _render(value: Any) -> str:
    if isinstance(value, Mapping):
        options = ",".join(f"{k}={_render(v)}" for k, v in value.items() if k != "name")
        name = _render(value["name"]) if "name" in value else ""
        return f"{name}({options})" if options or not name else name
    if isinstance(value, list | tuple):
        return "[" + ",".join(_render(v) for v in value) + "]"
    if isinstance(value, str):
        return value
    return json.dumps(value)
