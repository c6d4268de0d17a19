"""Which spec trains each arm of a study: the stream's `minimind run` command whose spec logs to
the arm's experiment, and the variant of it that makes the arm's runs (its `variant` tag, or for
an arm chosen by params, such as a tuned one, the variant whose flattened params equal its
`where`: a cell of the sweep's best.yaml).

    commands, unloaded = run_commands(study)   # what the streams' `run` commands train now
    specs, notes = arm_specs(study)            # per arm its Variant, or a note why none

A command's spec that does not load (a sweep's best.yaml before `minimind sweep --best` wrote it)
trains nothing yet: its arms get a note naming the file and why, and the others still resolve.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass

from minimind.spec import Variant
from minimind.study.manifest import Arm, Study, where_matches


@dataclass(frozen=True)
class RunCommand:
    """A stream's `minimind run SPEC -o ...` whose spec loads: the experiment its runs log to,
    the variants it trains, the spec's path and the overrides."""

    experiment: str
    variants: tuple[Variant, ...]
    path: str
    overrides: tuple[str, ...]

    @property
    def names(self) -> set[str]:
        return {v.name for v in self.variants}

    def describe(self) -> str:
        """`experiments/x.yaml -o seeds=[0]`: the spec as the stream runs it."""
        return shlex.join([self.path, *(w for o in self.overrides for w in ("-o", o))])


@dataclass(frozen=True)
class ArmSpec:
    """The spec an arm's runs train: `variant` of the stream command `command`."""

    key: str
    arm: Arm
    command: RunCommand
    variant: Variant


def run_commands(study: Study) -> tuple[list[RunCommand], list[str]]:
    """Every stream's `minimind run` command whose spec loads now, in the streams' order; and
    `<spec>: <why>` for each whose spec does not."""
    from minimind.spec import SpecError, expand, load_spec

    parser = argparse.ArgumentParser(add_help=False)  # `minimind run`'s spec and overrides
    parser.add_argument("spec")
    parser.add_argument("-o", "--override", action="append", default=[])
    found, unloaded = [], []
    for command in (c for stream in study.streams for c in stream):
        argv = shlex.split(command)[1:]
        if argv[:1] != ["run"]:
            continue
        args, _ = parser.parse_known_args(argv[1:])
        try:
            spec = load_spec(args.spec, args.override)
        except SpecError as e:  # a missing file's error names it already
            unloaded.append(str(e) if e.path == args.spec else f"{args.spec}: {e}")
            continue
        experiment = spec.tracking.experiment or spec.name
        found.append(RunCommand(experiment, tuple(expand(spec)), args.spec, tuple(args.override)))
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
        notes[key] = (
            f"arms.{key}: no stream's `minimind run` command trains {chosen} of "
            f"{arm.experiment}{why}"
        )
    return specs, notes


def _selects(arm: Arm, variant: Variant) -> bool:
    if arm.variant is not None:
        return variant.name == arm.variant
    from minimind.spec import flatten

    params = flatten(variant.spec)
    return all(k in params and where_matches(params[k], v) for k, v in (arm.where or {}).items())
