"""Operations on a raw (unvalidated) spec tree: dotted keys, deep merge, assignment.

A bare string is shorthand for `{name: <string>}` wherever a mapping with `name` is expected
(components, sampler, pruner), so merging or assigning an option into a bare name expands it.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from minimind.spec.errors import SpecError

# Mappings whose keys are themselves dotted spec keys: the rest of a dotted path is one key.
_DOTTED_KEY_MAPS: tuple[tuple[str, ...], ...] = (("ablate",), ("sweep", "params"))
_PART = re.compile(r"[A-Za-z_]\w*")


def split_key(key: str) -> list[str]:
    """`"train.optimizer.lr"` -> `["train", "optimizer", "lr"]`; keys under `ablate` and
    `sweep.params` stay whole: `"ablate.model.norm"` -> `["ablate", "model.norm"]`."""
    parts = key.split(".")
    if not all(_PART.fullmatch(p) for p in parts):
        raise SpecError(key, "not a dotted key such as train.optimizer.lr")
    for prefix in _DOTTED_KEY_MAPS:
        n = len(prefix)
        if tuple(parts[:n]) == prefix and len(parts) > n:
            return [*parts[:n], ".".join(parts[n:])]
    return parts


def deep_merge(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """`child` over `parent`: mappings merge key by key, anything else is replaced.

    Below the top level, a mapping whose `name` differs from its parent's replaces it (a
    different component keeps none of the old one's options).
    """
    merged = copy.deepcopy(parent)
    for key, value in child.items():
        merged[key] = _merge(parent[key], value) if key in parent else copy.deepcopy(value)
    return merged


def _merge(parent: Any, child: Any) -> Any:
    if isinstance(parent, str) and isinstance(child, dict) and "name" not in child:
        parent = {"name": parent}
    if not (isinstance(parent, dict) and isinstance(child, dict)):
        return copy.deepcopy(child)
    if "name" in child and "name" in parent and child["name"] != parent["name"]:
        return copy.deepcopy(child)
    return deep_merge(parent, child)


def assign(tree: dict[str, Any], parts: list[str], value: Any, seed: Any = None) -> None:
    """Set `tree[parts[0]][parts[1]]... = value`, creating mappings on the way.

    An intermediate bare string `s` becomes `{name: s}`. `seed(parts_so_far)` may supply the
    starting value of a missing intermediate (the preset's component for `model.mlp.top_k`).
    """
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None and seed is not None:
            child = seed(parts[: i + 1])
        if child is None:
            child = {}
        elif isinstance(child, str):
            child = {"name": child}
        elif not isinstance(child, dict):
            path = ".".join(parts[: i + 1])
            raise SpecError(path, f"is {child!r}, not a mapping; cannot set {parts[i + 1]!r}")
        node[part] = child
        node = child
    node[parts[-1]] = copy.deepcopy(value)
