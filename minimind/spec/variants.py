"""From one spec to the runs it describes: variants, flat params and a content hash."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import registry
from minimind.foundations.redact import without_passwords
from minimind.spec.expansion import cells, validate_spec
from minimind.spec.naming import BASE_VARIANT, render, variant_name
from minimind.spec.schema import Spec, apply

Scalar = str | int | float | bool


@dataclasses.dataclass(frozen=True)
class Variant:
    """One ablation cell: `spec` has the `assignments` applied and `ablate` emptied. On a
    ladder, the cell at one rung: `rung` names it and `arm` is the cell's name at every rung."""

    name: str
    spec: Spec
    assignments: dict[str, Any]
    rung: str | None = None
    arm: str | None = None


def expand(spec: Spec) -> list[Variant]:
    """The Cartesian product of `spec.ablate` (keys in order, values in list order), each
    variant's spec as the expansion step validated it (`expansion.cells`); with a ladder, that
    product at each rung in turn, smallest first.

    A spec without `ablate` gives one variant named `base`; on a ladder, `rung=<rung>` leads the
    name (`rung=r1,attention=mqa`; `rung=r1` alone for `base`). Names are unique: a clash left
    by making values path-safe gets a `-2`, `-3`... suffix.
    """
    variants: list[Variant] = []
    taken: set[str] = set()
    for cell in cells(spec):
        arm = variant_name(cell.assignments)
        name = arm if cell.rung is None else rung_variant_name(cell.rung, arm)
        unique, n = name, 1
        while unique in taken:
            n += 1
            unique = f"{name}-{n}"
        taken.add(unique)
        variants.append(
            Variant(
                unique,
                cell.spec,
                cell.assignments,
                rung=cell.rung,
                arm=None if cell.rung is None else arm,
            )
        )
    return variants


def rung_variant_name(rung: str, arm: str) -> str:
    """The name of arm `arm` (a `variant_name`) at the ladder rung `rung`."""
    label = f"rung={render(rung)}"
    return label if arm == BASE_VARIANT else f"{label},{arm}"


def with_values(spec: Spec, assignments: Mapping[str, Any]) -> Spec:
    """`spec` with each dotted key set to its value, validated (raises `SpecError`).

    For a sweep trial: `with_values(spec, {"train.optimizer.lr": 1e-3, "model.mlp": "relu"})`.
    """
    return validate_spec(apply(spec.tree(), assignments))


def resolved_model(spec: Spec) -> dict[str, Any]:
    """The resolved model as plain data; each slot is `{name: <canonical>, **options}` with
    every option filled in, so equivalent spellings (`rope-gptj`, `{name: rope, style: gptj}`)
    compare equal."""
    cfg = spec.model_config_obj()
    out: dict[str, Any] = {"preset": spec.model.preset}
    for field, value in cfg.model_dump(mode="json").items():
        if field in registry.MODEL_SLOTS:
            name, options = cfg.component(field)
            value = {"name": name, **options}
        out[field] = value
    out["head_dim"] = cfg.resolved_head_dim
    return json.loads(json.dumps(out, default=str))


def flatten(spec: Spec) -> dict[str, Scalar]:
    """The resolved spec as dotted keys, for MLflow params.

    The model is resolved (preset applied). A mapping with a `name` is listed under its own key
    (`model.position: rope`, `model.position.style: neox`); lists are JSON strings; null values
    and the free-text `description` are left out, as is the `launcher` (where the runs train,
    not what) and the `limits`, and the passwords of URIs (`without_password`).
    """
    tree = without_passwords(spec.tree())
    tree.pop("description")
    tree.pop("launcher")
    tree.pop("limits")
    tree["model"] = resolved_model(spec)
    out: dict[str, Scalar] = {}
    _flatten_into(out, "", tree)
    return out


def spec_hash(spec: Spec) -> str:
    """A 12-hex-digit sha256 of what determines training: the resolved model, data, train,
    plugins and ablate. Name, description, seeds, tracking, sweep and launcher do not change it."""
    tree = spec.tree()
    model = resolved_model(spec)
    model.pop("preset")
    cfg = spec.model_config_obj()
    if cfg.padded_vocab_size == cfg.vocab_size:
        # Padding that adds no row trains the same model: leave it out, so that specs (and
        # their runs, checkpoints and studies) from before the field existed keep their hash.
        model.pop("pad_vocab_multiple")
    if cfg.parametrization.name == "standard":  # as above: the run of before the field existed
        model.pop("parametrization")
    content = {key: tree[key] for key in ("data", "train", "plugins", "ablate")}
    if tree["ladder"] is not None:  # a spec without one keeps the hash it had before ladders
        content["ladder"] = tree["ladder"]
    if content["train"]["loss_chunk_tokens"] is None:
        # Keeps the hash of specs from before the option existed (the loss is the same).
        del content["train"]["loss_chunk_tokens"]
    if not content["train"]["evals"]:  # as above: no downstream tasks, the run of before
        del content["train"]["evals"]
    if content["train"]["evals_every"] is None:
        del content["train"]["evals_every"]
    if content["train"]["schedule"]["branches"] is None:  # as above: no budget branches
        del content["train"]["schedule"]["branches"]
    # Probes, the spike guard and an averaged figure never change what trains, unless spikes
    # skip updates.
    del content["train"]["probe_every"]
    del content["train"]["eval_average_last"]
    if not content["train"]["spike"]["skip"]:
        del content["train"]["spike"]
    canonical = json.dumps({"model": model, **content}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _flatten_into(out: dict[str, Scalar], prefix: str, value: Any) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "name" and prefix:
                out[prefix] = item
            else:
                _flatten_into(out, f"{prefix}.{key}" if prefix else str(key), item)
    elif isinstance(value, list | tuple):
        out[prefix] = json.dumps(value)
    elif value is not None:
        out[prefix] = value
