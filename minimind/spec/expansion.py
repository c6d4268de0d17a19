"""The spec's expansion step: from a validated `Spec` to its ablation cells, each checked as a
spec of its own, and the sweep's probes, after the schema has validated every section.

`validate_spec` validates a raw tree (`Spec`) and then expands it here, so that a spec that
loads is one whose every variant trains: each ablation value alone, then each combination, at
each ladder rung (`ladder:`), resized by `match:`, and both ends of every sweep dimension in every
variant. Every problem is a one-line `SpecError` naming the field where it is written. The cells
are kept on the spec (`cells`), so that expanding it again validates none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from pydantic import ValidationError

from minimind.spec.ablation import ablated_keys, ablation_grid, axis_options, key_problem, place
from minimind.spec.errors import SpecError, format_path, from_validation_error
from minimind.spec.ladder import LadderConfig, ladder_owner
from minimind.spec.matching import MatchConfig, match_knob, size
from minimind.spec.naming import variant_name
from minimind.spec.schema import Cell, Spec, apply, probe, try_validate

Assigned = list[tuple[dict[str, Any], Spec]]
"""Ablation cells: each one's assignments and its validated spec."""


def validate_spec(tree: Mapping[str, Any]) -> Spec:
    """Validate a raw spec tree and expand it (its variants and sweep probes); any problem is a
    one-line `SpecError`."""
    try:
        spec = Spec.model_validate(tree)
    except ValidationError as err:
        raise from_validation_error(err, Spec) from None
    if spec.ladder is not None:
        _check_ladder(spec, spec.ladder)
    cells(spec)
    if spec.sweep is not None and spec.sweep.params:
        _check_sweep_params(spec)
    return spec


def cells(spec: Spec) -> list[Cell]:
    """Each ablation cell of `spec` (its assignments and its spec: `ablate` and `ladder`
    emptied, `sweep` kept) in `ablation_grid` order, rung by rung with a ladder; `spec` alone
    without either. Validated once, when first expanded; each call returns copies."""
    if not spec.ablate and spec.ladder is None:
        return [Cell({}, spec.model_copy(deep=True))]
    if spec._cells is None:
        spec._cells = _expand(spec)
    out = []
    for cell in spec._cells:
        # The sweep section is checked against every cell by the spec's own expansion.
        sweep = None if spec.sweep is None else spec.sweep.model_copy(deep=True)
        copy = cell.spec.model_copy(update={"sweep": sweep}, deep=True)
        out.append(Cell(dict(cell.assignments), copy, cell.rung))
    return out


def _error(path: tuple[str | int, ...], message: str) -> NoReturn:
    raise SpecError(format_path(path), message)


def _check_ladder(spec: Spec, ladder: LadderConfig) -> None:
    """What the ladder cannot share with the rest of the spec: keys the arms vary, and a sweep
    (a ladder's rungs are not cells of an Optuna study)."""
    for key, axis in ablated_keys(spec.ablate).items():
        owner = ladder_owner(ladder, key)
        if owner is not None:
            _error(
                ("ablate", axis),
                f"{key} is set on every rung by {owner}; vary it in the rungs or the arms, "
                "not both",
            )
    if spec.sweep is not None:
        _error(("sweep",), "not with a ladder: sweep each rung's spec on its own")
    if len(ladder.budgets_per_param()) > 1:
        schedule = spec.train.schedule
        if schedule.name != "wsd" or schedule.warmup is None:
            _error(
                ("ladder", "tokens_per_param"),
                "several budgets are budget branches of one wsd run: set train.schedule to "
                f"{{name: wsd, warmup: <steps>}} (it is {schedule.name}"
                + (")" if schedule.warmup is not None else " without a warm-up)"),
            )
        if schedule.branches is not None:
            _error(
                ("train", "schedule", "branches"),
                "the ladder's tokens_per_param sets each rung's branches; give one or the other",
            )


def _expand(spec: Spec) -> list[Cell]:
    """Each ablation cell, at each ladder rung when there is a ladder, as a valid spec."""
    if spec.ladder is None:
        return [Cell(a, s) for a, s in _cells(spec, spec.base_tree(), "")]
    out = []
    for i, rung in enumerate(spec.ladder.names()):
        tree = _rung_tree(spec, spec.ladder, i)
        out += [Cell(a, s, rung) for a, s in _cells(spec, tree, f"at ladder rung {rung}: ")]
    return out


def _rung_tree(spec: Spec, ladder: LadderConfig, index: int) -> dict[str, Any]:
    """The base tree with rung `index`'s model fields and training budget, checked (a problem is
    reported at the rung): the budget counts the parameters of the rung's first ablation cell,
    the baseline arm."""
    where = f"ladder.rungs[{index}]"
    model = ladder.model_assignments(index)
    targets = {key: f"{where}.{key}" for key in model}
    base = apply(spec.base_tree(), model)
    outcome = try_validate(base, {})
    if isinstance(outcome, tuple):
        _error(*place(targets, where, *outcome))
    baseline = try_validate(base, ablation_grid(spec.ablate)[0])
    # An arm invalid at this rung is reported by `_cells`, at the arm.
    sized = outcome if isinstance(baseline, tuple) else baseline
    tree = apply(base, ladder.budget(index, sized.model_config_obj(), sized.train))
    budgeted = try_validate(tree, {})
    if isinstance(budgeted, tuple):
        path, message = budgeted
        _error((where,), f"{path}: {message} (with the rung's budget)")
    return tree


def _cells(spec: Spec, base: dict[str, Any], context: str) -> Assigned:
    """Each ablation cell over `base` as a valid spec, matched when `match` is set: each value
    alone is checked first, so that a problem names the value, then each combination (with one
    axis, its values are the combinations). `context` leads every message."""
    if not spec.ablate:
        return [({}, Spec.model_validate(base))]
    out: Assigned = []
    one_axis = len(spec.ablate) == 1
    for axis, values in spec.ablate.items():
        for i, assignments in enumerate(axis_options(axis, values)):
            outcome = try_validate(base, assignments)
            if isinstance(outcome, tuple):
                where = f"ablate.{axis}[{i}]"
                targets = {k: where if k == axis else f"{where}.{k}" for k in assignments}
                at, message = place(targets, where, *outcome)
                _error(at, context + message)
            if one_axis:
                out.append((assignments, outcome))
    if not one_axis:
        for combo in ablation_grid(spec.ablate):
            outcome = try_validate(base, combo)
            if isinstance(outcome, tuple):
                path, message = outcome
                _error(("ablate",), f"{context}variant {variant_name(combo)}: {path}: {message}")
            out.append((combo, outcome))
    if spec.match is not None:
        out = _match_variants(out, base, spec.match, context)
    return out


def _match_variants(
    cells: Assigned, base: dict[str, Any], match: MatchConfig, context: str
) -> Assigned:
    """Resize `match.knob` of every cell but the first (the baseline) to the first's size
    (`minimind.spec.matching`); the cells keep their assignments."""
    if len(cells) < 2:
        _error(("match",), "needs an ablation: variants to match to the first")

    def measure(spec: Spec) -> float:
        return size(spec.model_config_obj(), spec.train.seq_len, match.by)

    target = measure(cells[0][1])
    matched = [cells[0]]
    for assignments, spec in cells[1:]:
        if abs(measure(spec) - target) <= match.tolerance * target:
            matched.append((assignments, spec))
            continue
        outcome = match_knob(lambda a: try_validate(base, a), measure, assignments, target, match)
        if isinstance(outcome, str):
            _error(("match",), f"{context}variant {variant_name(assignments)}: {outcome}")
        matched.append((assignments, outcome[0]))
    return matched


def _check_sweep_params(spec: Spec) -> None:
    """Both ends of each range and every choice must validate, in every variant."""
    base = spec.base_tree()
    ablated = ablated_keys(spec.ablate)
    for key, param in spec.sweep_section().params.items():
        where = f"sweep.params.{key}"
        problem = key_problem(key)
        if problem:
            _error((where,), problem)
        if key in ablated:
            _error((where,), f"is also varied by ablate.{ablated[key]}; search or ablate it")
        labels = (
            [f"choices[{i}]" for i in range(len(param.choices or ()))]
            if param.type == "categorical"
            else ["low", "high"]
        )
        for combo in ablation_grid(spec.ablate):
            context = f"in variant {variant_name(combo)}, " if combo else ""
            for label, value in zip(labels, param.probe_values(), strict=True):
                failure = probe(base, {**combo, key: value})
                if failure:
                    path, message = place({key: f"{where}.{label}"}, f"{where}.{label}", *failure)
                    _error(path, context + message)
