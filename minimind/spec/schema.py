"""The experiment spec schema (README.md, 'Specs'; docs/architecture.md, 'Layers') and its whole-spec checks.

`Spec` validates each section and the cross-section constraints (`train.seq_len` within
`model.max_seq_len`); an invalid spec raises pydantic's `ValidationError`. Its variants (the
ablation cells, ladder rungs, `match:` and the sweep's probes) are the expansion step's
(`minimind.spec.expansion`), whose `validate_spec` validates a tree, expands it and turns every
problem into a one-line `SpecError`.
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
    check_axes,
)
from minimind.spec.errors import (
    SpecError,
    did_you_mean,
    first_error,
    format_path,
)
from minimind.spec.ladder import LadderConfig
from minimind.spec.launcher import LauncherConfig
from minimind.spec.limits import LimitsConfig, variant_count
from minimind.spec.matching import MatchConfig
from minimind.spec.naming import check_name
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
    # Each ablation cell (at each ladder rung) as the expansion step validated it, its spec
    # without `ablate`, `sweep` and `ladder` (`expansion.cells`); None until expanded.
    _cells: list[Cell] | None = PrivateAttr(default=None)

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
        if count > self.limits.max_variants:  # before the expansion step builds any variant
            field_error(
                ("ablate",),
                f"{count:,} variants, more than limits.max_variants "
                f"({self.limits.max_variants:,}); raise it to run them all",
            )
        return self

    @property
    def experiment(self) -> str:
        """The MLflow experiment of the spec's runs: `tracking.experiment`, which validation
        resolves once to the spec's `name` unless the spec names one."""
        return self.tracking.experiment or self.name

    def sweep_section(self) -> SweepConfig:
        """The `sweep:` section, for the code that runs a sweep: a spec without one is a
        `SpecError` naming the field."""
        if self.sweep is None:
            raise SpecError(
                "sweep",
                "missing: `minimind sweep` needs a sweep section (see experiments/lr_sweep.yaml)",
            )
        return self.sweep

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
