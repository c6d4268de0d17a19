"""The steps of a study's streams, typed: what each stream trains, parsed once from the manifest.

A stream is a list of steps, each a mapping:

    - run: experiments/study/arms.yaml          # `minimind run`: the spec, and optionally
      overrides: [train.steps=300]               #   `-o` overrides, the variants to train
      variants: [norm=layernorm]                 #   (all by default) and the seeds (the
      seeds: [0, 1, 2]                           #   spec's own by default)
    - sweep: experiments/study/tune_adamw.yaml  # `minimind sweep`: the spec, its overrides
      best: true                                 #   and whether it only writes best.yaml

or, as a shorthand read into the same step, the command a person would type:
`minimind run experiments/study/arms.yaml -o seeds=[0,1,2] --variant norm=layernorm`,
`minimind sweep experiments/study/tune_adamw.yaml --best` (a `-o seeds=...` there is the step's
`seeds`). A bad step is one `SpecError` naming its field path, e.g.
`streams[1][8].seeds[0]: must be >= 0, got -1`. Only `streams.py` turns a step into the
arguments of the process that runs it.
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator, model_validator

from minimind.foundations.strict_config import StrictNumbers, field_error
from minimind.spec.errors import SpecError, did_you_mean
from minimind.spec.loader import parse_override
from minimind.spec.sections import MAX_SEED

Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]


class _Step(StrictNumbers):
    model_config = {"extra": "forbid", "frozen": True}

    overrides: tuple[str, ...] = ()
    """`KEY=VALUE` spec overrides, as `-o` takes them."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            keys = sorted(field.alias or name for name, field in cls.model_fields.items())
            for key in data:
                if key not in keys:
                    field_error(
                        (str(key),),
                        f"unknown key; choices: {', '.join(keys)}{did_you_mean(str(key), keys)}",
                    )
        return data

    @field_validator("overrides")
    @classmethod
    def _overrides_parse(cls, overrides: tuple[str, ...]) -> tuple[str, ...]:
        for i, text in enumerate(overrides):
            try:
                key = parse_override(text)[0]
            except SpecError as e:
                field_error((i,), str(e))
            if key == "seeds":
                field_error((i,), "a step's seeds are its `seeds`, not an override")
        return overrides


class RunStep(_Step):
    """`minimind run SPEC`: every variant (or `variants`) of the spec, on its seeds (or
    `seeds`), resumed when the study runs again."""

    kind: ClassVar[str] = "run"
    spec: str = Field(alias="run", min_length=1)
    variants: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    seeds: tuple[Seed, ...] | None = Field(default=None, min_length=1)

    @field_validator("variants", "seeds")
    @classmethod
    def _distinct(cls, values: tuple[object, ...] | None) -> tuple[object, ...] | None:
        for i, value in enumerate(values or ()):
            if value in values[:i]:  # type: ignore[index]
                field_error((i,), f"{value} is listed twice")
        return values

    def spec_overrides(self) -> tuple[str, ...]:
        """The overrides the spec is loaded with: the step's, then its seeds."""
        if self.seeds is None:
            return self.overrides
        return (*self.overrides, f"seeds=[{','.join(map(str, self.seeds))}]")


class SweepStep(_Step):
    """`minimind sweep SPEC`: the spec's Optuna studies topped up to their trials, or with
    `best`, only their best.yaml written."""

    kind: ClassVar[str] = "sweep"
    spec: str = Field(alias="sweep", min_length=1)
    best: bool = False


_KINDS = {step.kind: step for step in (RunStep, SweepStep)}
# The command line's options of each kind: flag -> the step's field.
_OPTIONS = {
    "run": {"-o": "overrides", "--override": "overrides", "--variant": "variants"},
    "sweep": {"-o": "overrides", "--override": "overrides", "--best": "best"},
}
_SWITCHES = {"best"}  # fields a flag sets true without a value


def _mapping(value: object) -> object:
    """A step's mapping: a command line read into one, a mapping checked to name one kind."""
    if isinstance(value, str):
        return _from_command(value)
    if isinstance(value, dict):
        kinds = [kind for kind in _KINDS if kind in value]
        if len(kinds) != 1:
            field_error((), "a step names exactly one of run: SPEC or sweep: SPEC")
    elif not isinstance(value, RunStep | SweepStep):
        field_error((), "a step is a mapping (run: SPEC or sweep: SPEC) or a minimind command")
    return value


def _from_command(text: str) -> dict[str, object]:
    """`minimind run a.yaml -o seeds=[0,1] --variant x` -> `{run: a.yaml, seeds: [0, 1],
    variants: [x]}`."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        field_error((), f"cannot be split into arguments: {e}")
    if len(words) < 3 or words[0] != "minimind" or words[1] not in _KINDS:
        field_error((), "a step is `minimind run SPEC ...` or `minimind sweep SPEC ...`")
    kind, options = words[1], _OPTIONS[words[1]]
    step: dict[str, Any] = {kind: words[2]}
    rest = iter(words[3:])
    for word in rest:
        if word not in options:
            known = ", ".join(options)
            field_error((), f"{word}: not an option of a study's {kind} step; options: {known}")
        field = options[word]
        if field in _SWITCHES:
            step[field] = True
            continue
        value = next(rest, None)
        if value is None:
            field_error((), f"{word} needs a value")
        step.setdefault(field, []).append(value)
    return _seeds_apart(step)


def _seeds_apart(step: dict[str, Any]) -> dict[str, Any]:
    """A run's `-o seeds=[...]` as the step's `seeds` (the last one, as `minimind run` reads
    them); the other overrides as they are."""
    if "run" not in step:
        return step
    kept = []
    for text in step.get("overrides", []):
        try:
            key, value, _ = parse_override(text)
        except SpecError:
            key, value = None, None  # kept: the step's validation names the problem
        if key == "seeds":
            step["seeds"] = value
        else:
            kept.append(text)
    return {**step, "overrides": kept}


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return next(step.__name__ for kind, step in _KINDS.items() if kind in value)
    return type(value).__name__


Step = Annotated[
    Annotated[RunStep, Tag("RunStep")] | Annotated[SweepStep, Tag("SweepStep")],
    Discriminator(_kind),
    BeforeValidator(_mapping),
]
"""One step of a stream: a `RunStep` or a `SweepStep`, from its mapping or its command line."""
