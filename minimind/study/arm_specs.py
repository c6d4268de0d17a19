"""Which spec trains each arm of a study: the stream's run step whose spec logs to the arm's
experiment, and the variant of it that makes the arm's runs (its `variant` tag, or for an arm
chosen by params, such as a tuned one, the variant whose flattened params equal its `where`: a
cell of the sweep's best.yaml).

    commands, unloaded = run_commands(study)   # what the streams' run steps train now
    specs, notes = arm_specs(study)            # per arm its Variant, or a note why none

A step's spec that does not load (a sweep's best.yaml before its `best` step wrote it) trains
nothing yet: its arms get a note naming the file and why, and the others still resolve.
"""

from __future__ import annotations

from dataclasses import dataclass

from minimind.spec import Variant
from minimind.study.manifest import Arm, Study, where_matches
from minimind.study.steps import RunStep
from minimind.study.streams import command_line


@dataclass(frozen=True)
class RunCommand:
    """A stream's run step whose spec loads: the experiment its runs log to, the variants it
    trains, and the step."""

    experiment: str
    variants: tuple[Variant, ...]
    step: RunStep

    @property
    def names(self) -> set[str]:
        return {v.name for v in self.variants}

    def describe(self) -> str:
        """`minimind run experiments/x.yaml -o 'seeds=[0]'`: the step as the stream runs it."""
        return command_line(self.step)


@dataclass(frozen=True)
class ArmSpec:
    """The spec an arm's runs train: `variant` of the stream's run step `command`."""

    key: str
    arm: Arm
    command: RunCommand
    variant: Variant


def run_commands(study: Study) -> tuple[list[RunCommand], list[str]]:
    """Every stream's run step whose spec loads now, in the streams' order; and `<spec>: <why>`
    for each whose spec does not."""
    from minimind.spec import SpecError, expand, load_spec

    found, unloaded = [], []
    for step in study.run_steps():
        try:
            spec = load_spec(step.spec, step.spec_overrides())
        except SpecError as e:  # a missing file's error names it already
            unloaded.append(str(e) if e.path == step.spec else f"{step.spec}: {e}")
            continue
        experiment = spec.tracking.experiment or spec.name
        found.append(RunCommand(experiment, tuple(expand(spec)), step))
    return found, unloaded


def arm_specs(study: Study) -> tuple[dict[str, ArmSpec], dict[str, str]]:
    """Per arm (the manifest's order) the spec its runs train: the first `run` command of its
    experiment that trains its variant, or whose variant's params equal its `where`. Arms that
    no loaded command trains are in the second mapping instead, with a one-line note."""
    commands, unloaded = run_commands(study)
    specs, notes = {}, {}
    for key, arm in study.arms.items():
        found = next(
            (
                (command, variant)
                for command in commands
                if command.experiment == arm.experiment
                for variant in command.variants
                if _selects(arm, variant)
            ),
            None,
        )
        if found is not None:
            specs[key] = ArmSpec(key, arm, *found)
            continue
        chosen = f"variant {arm.variant}" if arm.variant is not None else f"where {arm.where}"
        why = f"; not loaded: {'; '.join(unloaded)}" if unloaded else ""
        notes[key] = f"arms.{key}: no stream's run step trains {chosen} of {arm.experiment}{why}"
    return specs, notes


def _selects(arm: Arm, variant: Variant) -> bool:
    if arm.variant is not None:
        return variant.name == arm.variant
    from minimind.spec import flatten

    params = flatten(variant.spec)
    return all(k in params and where_matches(params[k], v) for k, v in (arm.where or {}).items())
