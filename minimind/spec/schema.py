"""The experiment spec schema (README.md, 'Specs'; docs/architecture.md, 'Layers') and its whole-spec checks.

`Spec` validates everything a run needs before anything trains: each section, the cross-section
constraints (`train.seq_len` within `model.max_seq_len`), every ablation variant and both ends of
every sweep dimension. An invalid spec raises pydantic's `ValidationError`; `validate_spec` turns
it into a one-line `SpecError`. The variants validated here are kept (`Spec.variant_specs`), so
that expanding a spec validates none of them again.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

import registry
from minimind.data.config import DataConfig
from minimind.foundations.strict_config import StrictNumbers, field_error
from minimind.model.config import MUP_OPTIMIZERS, ModelConfig
from minimind.spec.ablation import (
    ablated_keys,
    ablation_grid,
    axis_options,
    check_axes,
    key_problem,
    place,
)
from minimind.spec.errors import (
    SpecError,
    did_you_mean,
    first_error,
    format_path,
    from_validation_error,
)
from minimind.spec.ladder import LadderConfig, ladder_owner
from minimind.spec.launcher import LauncherConfig
from minimind.spec.limits import LimitsConfig, variant_count
from minimind.spec.matching import MatchConfig, match_knob, size
from minimind.spec.naming import check_name, variant_name
from minimind.spec.sections import MAX_SEED, PowerHint, TrackingConfig, TrainConfig
from minimind.spec.sweep_config import SweepConfig
from minimind.spec.tree import assign, split_key

_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class ModelSection(StrictNumbers):
    """`preset` plus any `ModelConfig` field, which overrides the preset's value."""

    model_config = ConfigDict(extra="allow")

    preset: str = "tiny"
    _resolved: ModelConfig = PrivateAttr()

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, preset: str) -> str:
        names = ModelConfig.preset_names()
        if preset not in names:
            raise ValueError(
                f"unknown preset {preset!r}; choices: {', '.join(names)}{did_you_mean(preset, names)}"
            )
        return preset

    @model_validator(mode="after")
    def _resolve(self) -> ModelSection:
        try:
            self._resolved = ModelConfig.preset(self.preset, **self.fields)
        except ValidationError as err:
            loc, message = first_error(err, ModelConfig)
            field_error(loc, message)
        return self

    @property
    def fields(self) -> dict[str, Any]:
        """The fields set over the preset."""
        return dict(self.model_extra or {})

    def resolve(self) -> ModelConfig:
        """The preset with the fields applied."""
        return self._resolved


AblationValues = Annotated[list[Any], Field(min_length=1)]


class Spec(StrictNumbers):
    """An experiment: one model/data/train configuration, the seeds to run it with, the
    `ablate` axes that turn it into variants, and an optional Optuna `sweep`.

    `plugins` are imported before `model` is validated, so plugin components validate.
    `extends` is consumed by `load_spec`; a loaded spec has it merged and set to None.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    extends: str | None = None
    plugins: list[str] = Field(default_factory=list)
    model: ModelSection = Field(default_factory=ModelSection)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    seeds: list[Annotated[int, Field(ge=0, le=MAX_SEED)]] = Field(
        default_factory=lambda: [0], min_length=1
    )
    ablate: dict[str, AblationValues] = Field(default_factory=dict)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    sweep: SweepConfig | None = None
    power: PowerHint | None = None
    match: MatchConfig | None = None
    launcher: LauncherConfig = Field(default_factory=LauncherConfig)
    ladder: LadderConfig | None = None
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    # Each ablation cell (at each ladder rung) as validated, its spec without `ablate`, `sweep`
    # and `ladder`.
    _variants: list[Cell] = PrivateAttr(default_factory=list)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        return check_name(name)

    @field_validator("plugins")
    @classmethod
    def _load_plugins(cls, modules: list[str]) -> list[str]:
        for i, module in enumerate(modules):
            if not _MODULE.fullmatch(module):
                field_error((i,), f"not a module name: {module!r}")
            try:
                registry.load_plugins([module])
            except Exception as err:  # a plugin is user code: any failure is a spec error
                field_error((i,), f"cannot load plugin {module!r}: {type(err).__name__}: {err}")
        return modules

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        for i, seed in enumerate(seeds):
            if seed in seeds[:i]:
                field_error((i,), f"duplicate seed {seed}")
        return seeds

    @field_validator("ablate")
    @classmethod
    def _ablation_axes(cls, ablate: dict[str, list[Any]]) -> dict[str, list[Any]]:
        check_axes(ablate)
        return ablate

    @model_validator(mode="after")
    def _whole_spec(self) -> Spec:
        if self.tracking.experiment is None:
            self.tracking.experiment = self.name
        model = self.model.resolve()
        if self.train.seq_len > model.max_seq_len:
            field_error(
                ("train", "seq_len"),
                f"must be <= model.max_seq_len ({model.max_seq_len}), got {self.train.seq_len}",
            )
        tokenizer = self.data.tokenizer
        if tokenizer.path is None and model.vocab_size < tokenizer.vocab_size:
            field_error(
                ("model", "vocab_size"),
                f"must be >= data.tokenizer.vocab_size ({tokenizer.vocab_size}), "
                f"got {model.vocab_size}",
            )
        if model.parametrization.name == "mup" and self.train.optimizer.name not in MUP_OPTIMIZERS:
            field_error(
                ("train", "optimizer", "name"),
                f"model.parametrization mup is defined for {', '.join(MUP_OPTIMIZERS)}, "
                f"not {self.train.optimizer.name!r}",
            )
        count = variant_count(self.ablate, len(self.ladder.names()) if self.ladder else 1)
        if count > self.limits.max_variants:  # before any variant is built
            field_error(
                ("ablate",),
                f"{count:,} variants, more than limits.max_variants "
                f"({self.limits.max_variants:,}); raise it to run them all",
            )
        if self.ladder is not None:
            self._check_ladder(self.ladder)
        if self.ablate or self.ladder is not None:
            self._check_variants()
        if self.sweep is not None and self.sweep.params:
            self._check_sweep_params()
        return self

    def _check_ladder(self, ladder: LadderConfig) -> None:
        """What the ladder cannot share with the rest of the spec: keys the arms vary, and a
        sweep (a ladder's rungs are not cells of an Optuna study)."""
        for key, axis in ablated_keys(self.ablate).items():
            owner = ladder_owner(ladder, key)
            if owner is not None:
                field_error(
                    ("ablate", axis),
                    f"{key} is set on every rung by {owner}; vary it in the rungs or the arms, "
                    "not both",
                )
        if self.sweep is not None:
            field_error(("sweep",), "not with a ladder: sweep each rung's spec on its own")

    def _check_variants(self) -> None:
        """Each ablation cell, at each ladder rung when there is a ladder, as a valid spec,
        kept for `variant_specs`."""
        if self.ladder is None:
            self._variants = [Cell(a, s) for a, s in self._cells(self.base_tree(), "")]
            return
        for i, rung in enumerate(self.ladder.names()):
            tree = self._rung_tree(self.ladder, i)
            cells = self._cells(tree, f"at ladder rung {rung}: ")
            self._variants += [Cell(a, s, rung) for a, s in cells]

    def _rung_tree(self, ladder: LadderConfig, index: int) -> dict[str, Any]:
        """The base tree with rung `index`'s model fields and training budget, checked (a
        problem is reported at the rung): the budget counts the parameters of the rung's first
        ablation cell, the baseline arm."""
        where = f"ladder.rungs[{index}]"
        model = ladder.model_assignments(index)
        targets = {key: f"{where}.{key}" for key in model}
        base = apply(self.base_tree(), model)
        outcome = try_validate(base, {})
        if isinstance(outcome, tuple):
            field_error(*place(targets, where, *outcome))
        baseline = try_validate(base, ablation_grid(self.ablate)[0])
        # An arm invalid at this rung is reported by `_cells`, at the arm.
        sized = outcome if isinstance(baseline, tuple) else baseline
        tree = apply(base, ladder.budget(index, sized.model_config_obj(), sized.train))
        budgeted = try_validate(tree, {})
        if isinstance(budgeted, tuple):
            path, message = budgeted
            field_error((where,), f"{path}: {message} (with the rung's budget)")
        return tree

    def _cells(self, base: dict[str, Any], context: str) -> list[tuple[dict[str, Any], Spec]]:
        """Each ablation cell over `base` as a valid spec, matched when `match` is set: each
        value alone is checked first, so that a problem names the value, then each combination
        (with one axis, its values are the combinations). `context` leads every message."""
        if not self.ablate:
            return [({}, Spec.model_validate(base))]
        cells: list[tuple[dict[str, Any], Spec]] = []
        one_axis = len(self.ablate) == 1
        for axis, values in self.ablate.items():
            for i, assignments in enumerate(axis_options(axis, values)):
                outcome = try_validate(base, assignments)
                if isinstance(outcome, tuple):
                    where = f"ablate.{axis}[{i}]"
                    targets = {k: where if k == axis else f"{where}.{k}" for k in assignments}
                    at, message = place(targets, where, *outcome)
                    field_error(at, context + message)
                if one_axis:
                    cells.append((assignments, outcome))
        if not one_axis:
            for combo in ablation_grid(self.ablate):
                outcome = try_validate(base, combo)
                if isinstance(outcome, tuple):
                    path, message = outcome
                    field_error(
                        ("ablate",), f"{context}variant {variant_name(combo)}: {path}: {message}"
                    )
                cells.append((combo, outcome))
        if self.match is not None:
            cells = self._match_variants(cells, base, self.match, context)
        return cells

    def _match_variants(
        self,
        cells: list[tuple[dict[str, Any], Spec]],
        base: dict[str, Any],
        match: MatchConfig,
        context: str,
    ) -> list[tuple[dict[str, Any], Spec]]:
        """Resize `match.knob` of every cell but the first (the baseline) to the first's size
        (`minimind.spec.matching`); the cells keep their assignments."""
        if len(cells) < 2:
            field_error(("match",), "needs an ablation: variants to match to the first")

        def measure(spec: Spec) -> float:
            return size(spec.model_config_obj(), spec.train.seq_len, match.by)

        target = measure(cells[0][1])
        matched = [cells[0]]
        for assignments, spec in cells[1:]:
            if abs(measure(spec) - target) <= match.tolerance * target:
                matched.append((assignments, spec))
                continue
            outcome = match_knob(
                lambda a: try_validate(base, a), measure, assignments, target, match
            )
            if isinstance(outcome, str):
                field_error(("match",), f"{context}variant {variant_name(assignments)}: {outcome}")
            matched.append((assignments, outcome[0]))
        return matched

    def sweep_section(self) -> SweepConfig:
        """The `sweep:` section, for the code that runs a sweep: a spec without one is a
        `SpecError` naming the field."""
        if self.sweep is None:
            raise SpecError(
                "sweep",
                "missing: `minimind sweep` needs a sweep section (see experiments/lr_sweep.yaml)",
            )
        return self.sweep

    def _check_sweep_params(self) -> None:
        """Both ends of each range and every choice must validate, in every variant."""
        base = self.base_tree()
        ablated = ablated_keys(self.ablate)
        for key, param in self.sweep_section().params.items():
            where = f"sweep.params.{key}"
            problem = key_problem(key)
            if problem:
                field_error((where,), problem)
            if key in ablated:
                field_error(
                    (where,), f"is also varied by ablate.{ablated[key]}; search or ablate it"
                )
            labels = (
                [f"choices[{i}]" for i in range(len(param.choices or ()))]
                if param.type == "categorical"
                else ["low", "high"]
            )
            for combo in ablation_grid(self.ablate):
                context = f"in variant {variant_name(combo)}, " if combo else ""
                for label, value in zip(labels, param.probe_values(), strict=True):
                    failure = probe(base, {**combo, key: value})
                    if failure:
                        path, message = place(
                            {key: f"{where}.{label}"}, f"{where}.{label}", *failure
                        )
                        field_error(path, context + message)

    def variant_specs(self) -> list[Cell]:
        """Each ablation cell (its assignments and its spec: `ablate` and `ladder` emptied,
        `sweep` kept) in `ablation_grid` order, rung by rung with a ladder; this spec alone
        without either. Validated with this spec, not again."""
        if not self._variants:
            return [Cell({}, self.model_copy(deep=True))]
        out = []
        for cell in self._variants:
            # The sweep section is checked against every cell by this spec's own validation.
            sweep = None if self.sweep is None else self.sweep.model_copy(deep=True)
            spec = cell.spec.model_copy(update={"sweep": sweep}, deep=True)
            out.append(Cell(dict(cell.assignments), spec, cell.rung))
        return out

    def model_config_obj(self) -> ModelConfig:
        """The resolved model: the preset with the section's fields applied."""
        return self.model.resolve()

    def tree(self) -> dict[str, Any]:
        """This spec as plain data (JSON types) that validates back to an equal spec."""
        return self.model_dump(mode="json", exclude={"extends"})

    def base_tree(self) -> dict[str, Any]:
        """`tree()` without `ablate`, `sweep` and `ladder`: the starting point of one variant."""
        return {**self.tree(), "ablate": {}, "sweep": None, "ladder": None}


@dataclasses.dataclass(frozen=True)
class Cell:
    """One validated ablation cell: its `assignments` (the arm) and its `spec`, at the ladder
    rung named `rung` (None without a ladder)."""

    assignments: dict[str, Any]
    spec: Spec
    rung: str | None = None


def validate_spec(tree: Mapping[str, Any]) -> Spec:
    """Validate a raw spec tree; any problem is a one-line `SpecError`."""
    try:
        return Spec.model_validate(tree)
    except ValidationError as err:
        raise from_validation_error(err, Spec) from None


def apply(tree: Mapping[str, Any], assignments: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `tree` with each dotted key set to its value.

    Setting an option of a model slot the section leaves to its preset (`model.mlp.top_k` on
    `minimind-moe`) starts from the preset's component, so its other options are kept.
    """
    out = copy.deepcopy(dict(tree))
    for key, value in assignments.items():
        assign(out, split_key(key), value, seed=lambda parts: _preset_component(out, parts))
    return out


def try_validate(tree: Mapping[str, Any], assignments: Mapping[str, Any]) -> Spec | tuple[str, str]:
    """`tree` with `assignments` as a valid spec, or (path, message) of its first problem."""
    try:
        return Spec.model_validate(apply(tree, assignments))
    except SpecError as err:
        return err.path, err.message
    except ValidationError as err:
        loc, message = first_error(err, Spec)
        return format_path(loc), message


def probe(tree: Mapping[str, Any], assignments: Mapping[str, Any]) -> tuple[str, str] | None:
    """(path, message) of the first problem of `tree` with `assignments`, or None if valid."""
    outcome = try_validate(tree, assignments)
    return outcome if isinstance(outcome, tuple) else None


def _preset_component(tree: dict[str, Any], parts: list[str]) -> dict[str, Any] | None:
    section = tree.get("model")
    if len(parts) != 2 or parts[0] != "model" or parts[1] not in registry.MODEL_SLOTS:
        return None
    preset = section.get("preset", "tiny") if isinstance(section, dict) else "tiny"
    if preset not in ModelConfig.preset_names():
        return None
    name, options = ModelConfig.preset(preset).component(parts[1])
    return {"name": name, **options}
