"""Reading specs from YAML files: `extends`, `-o` overrides, relative data paths, and dumping.

Only `yaml.SafeLoader` (with duplicate keys rejected) reads spec text. Every problem, from a missing file to a bad value, is a
one-line `SpecError`.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from minimind.data.config import EMBEDDED_CORPORA
from minimind.foundations.redact import without_passwords
from minimind.spec.ablation import ablated_keys
from minimind.spec.errors import SpecError
from minimind.spec.expansion import validate_spec
from minimind.spec.ladder import ladder_owner
from minimind.spec.schema import Spec, apply
from minimind.spec.tree import deep_merge, split_key
from minimind.spec.variants import resolved_model

# Spec keys whose values are file paths, resolved against the spec file that writes them.
_PATH_KEYS = ("data.corpus", "data.tokenizer.path")


# How many nodes a document may hold once its aliases are expanded: a spec is a few hundred; a
# "billion laughs" alias bomb is billions, and every pass over it would hang.
MAX_EXPANDED_NODES = 100_000


class _UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that rejects a mapping key written twice, which plain YAML loading
    resolves silently as last-wins (the error that follows would name a value nobody wrote), and
    a document whose aliases expand past `MAX_EXPANDED_NODES` nodes."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_unique_keys(node, "", [MAX_EXPANDED_NODES])
        return self.construct_document(node)


def _check_unique_keys(node: yaml.Node, path: str, budget: list[int]) -> None:
    # `budget` counts down the nodes visited, an alias's every time it is used, so that an alias
    # bomb is refused after MAX_EXPANDED_NODES steps instead of being walked for hours.
    budget[0] -= 1
    if budget[0] < 0:
        raise SpecError(
            path or "spec",
            f"the YAML expands past {MAX_EXPANDED_NODES:,} values through its aliases (&/*); "
            "write the values out",
        )
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_unique_keys(item, f"{path}[{i}]", budget)
    elif isinstance(node, yaml.MappingNode):
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else id(key_node)
            child = f"{path}.{key}" if path else str(key)
            line = key_node.start_mark.line + 1
            if key in first_line:
                where = f" (lines {first_line[key]} and {line})" if first_line[key] != line else ""
                raise SpecError(child, f"duplicate key{where}")
            first_line[key] = line
            _check_unique_keys(value_node, child, budget)


def safe_load_unique(text: str) -> Any:
    """`yaml.safe_load`, except that a duplicate mapping key or an alias bomb is a `SpecError`
    naming it."""
    loader = _UniqueKeyLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> Spec:
    """Load, merge (`extends`), override and validate the spec at `path`.

    `overrides` are `KEY=VALUE` strings: a dotted key (`train.optimizer.lr`) and a YAML scalar or
    flow value (`3.0e-4`, `[0, 1]`, `{name: rope, style: gptj}`). Corpus and tokenizer paths
    written in a spec file are taken relative to that file when they exist there, else relative
    to the current directory.
    """
    tree = _read_with_parents(Path(path), ())
    parsed = [parse_override(text) for text in overrides]
    for key, value, _ in parsed:  # one at a time: a later override of the same key wins
        if key == "extends":
            raise SpecError(key, "cannot be overridden; pass the other file as the spec")
        tree = apply(tree, {key: value})
    try:
        spec = validate_spec(tree)
    except SpecError as err:
        for key, _, text in parsed:
            if err.path == key or err.path.startswith((key + ".", key + "[")):
                raise SpecError(err.path, f"{err.message} (from -o {text})") from None
        raise
    for key, _, _ in parsed:
        for varied, axis in ablated_keys(spec.ablate).items():
            if key == varied or key.startswith(varied + "."):
                raise SpecError(
                    key, f"is varied by ablate.{axis}; override ablate.{axis}=[...] instead"
                )
        owner = None if spec.ladder is None else ladder_owner(spec.ladder, key)
        if owner is not None:
            raise SpecError(key, f"is set on every rung by {owner}; override the ladder instead")
    return spec


def parse_override(text: str) -> tuple[str, Any, str]:
    """`"train.steps=50"` -> `("train.steps", 50, "train.steps=50")`."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep:
        raise SpecError(key or "-o", f"an override must look like KEY=VALUE, got {text!r}")
    if not key:
        raise SpecError("-o", f"an override needs a key before '=', got {text!r}")
    split_key(key)
    try:
        value = safe_load_unique(raw)
    except yaml.YAMLError as err:
        raise SpecError(key, f"cannot parse override value {raw!r}: {_yaml_problem(err)}") from None
    except SpecError as err:  # a duplicate key inside a flow mapping: `{lr: 0.1, lr: 0.002}`
        inner = err.path if err.path.startswith("[") else f".{err.path}"
        raise SpecError(key + inner, f"{err.message} in -o {text}") from None
    return key, value, text


def dump_spec(spec: Spec) -> str:
    """The spec as YAML that `load_spec` reads back to an equal spec, but for the passwords of
    its URIs, which are left out (`without_password`).

    The model section stays as written (preset plus fields), so derived sizes still follow an
    ablated or searched `dim`; the resolved model is listed in a leading comment.
    """
    resolved = resolved_model(spec)
    resolved.pop("preset")
    lines = yaml.safe_dump(resolved, sort_keys=False, default_flow_style=None, width=1000)
    before = ", before ablation" if spec.ablate else ""
    header = (
        f"# Resolved model (preset {spec.model.preset!r} with the model fields below{before}):\n"
    )
    header += "".join(f"#   {line}\n" for line in lines.splitlines())
    tree = without_passwords(spec.tree())  # stored and shared: the password stays in the env
    return header + yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, width=100)


def _read_with_parents(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    """The file's tree deep-merged over its `extends` chain."""
    tree = read_yaml_mapping(path)
    _resolve_data_paths(tree, path.parent)
    parent = tree.pop("extends", None)
    if parent is None:
        return tree
    if not isinstance(parent, str) or not parent:
        raise SpecError("extends", f"must be a path to a spec file, got {parent!r}")
    here = path.resolve()
    parent_path = (path.parent / parent).resolve()
    trail = [*chain, here]
    if parent_path in trail:
        names = " -> ".join(p.name for p in [*trail[trail.index(parent_path) :], parent_path])
        raise SpecError("extends", f"cycle: {names}")
    if not parent_path.is_file():
        raise SpecError("extends", f"file not found: {parent_path}")
    return deep_merge(_read_with_parents(parent_path, tuple(trail)), tree)


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """A YAML file of a mapping (safe loader, duplicate keys rejected); every problem reading
    it is a one-line `SpecError` naming the file. An empty file is an empty mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(path), "file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(str(path), f"cannot read: {err}") from None
    try:
        tree = safe_load_unique(text)
    except yaml.YAMLError as err:
        raise SpecError(str(path), f"invalid YAML: {_yaml_problem(err)}") from None
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise SpecError(str(path), f"must be a mapping of sections, got {type(tree).__name__}")
    return tree


def _resolve_data_paths(tree: dict[str, Any], base: Path) -> None:
    """Make corpus and tokenizer paths that exist next to the spec file absolute: in `data`,
    in ablation values and in sweep choices."""
    data = tree.get("data")
    if isinstance(data, dict):
        _resolve_path(data, "corpus", base)
        for part in ("sources", "eval_sets"):  # a mixture's sources, the held-out suite
            named = data.get(part)
            for entry in named.values() if isinstance(named, dict) else ():
                if isinstance(entry, dict):
                    _resolve_path(entry, "corpus", base)
        if isinstance(data.get("tokenizer"), dict):
            _resolve_path(data["tokenizer"], "path", base)
    ablate = tree.get("ablate")
    for axis, values in ablate.items() if isinstance(ablate, dict) else ():
        if axis in _PATH_KEYS and isinstance(values, list):
            for i in range(len(values)):
                _resolve_path(values, i, base)
        elif isinstance(values, list):
            for group in values:
                for key in _PATH_KEYS:
                    if isinstance(group, dict) and key in group:
                        _resolve_path(group, key, base)
    sweep = tree.get("sweep")
    params = sweep.get("params") if isinstance(sweep, dict) else None
    for key, param in params.items() if isinstance(params, dict) else ():
        choices = param.get("choices") if isinstance(param, dict) else None
        if key in _PATH_KEYS and isinstance(choices, list):
            for i in range(len(choices)):
                _resolve_path(choices, i, base)


def _resolve_path(container: Any, index: Any, base: Path) -> None:
    value = container[index] if isinstance(container, list) else container.get(index)
    if isinstance(value, str) and value not in EMBEDDED_CORPORA:
        container[index] = _relative_to(value, base)


def _relative_to(path: str, base: Path) -> str:
    candidate = base / Path(path).expanduser()
    if candidate.exists():
        return str(candidate.resolve())
    if glob.has_magic(path) and glob.glob(str(candidate), recursive=True):
        return str(candidate)  # a glob matching files next to the spec
    return path


def _yaml_problem(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"
