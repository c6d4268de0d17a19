"""`minimind coordcheck SPEC [--widths 32,64,128,256] [--steps 5] [--seeds 0,1] [--out DIR]`:
μP's coordinate check of a spec's model (`minimind.bench.coordcheck`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from minimind.commands.options import add_spec_arguments
from minimind.foundations.exit_codes import EXIT_OK, fail
from minimind.foundations.paths import REPORTS_DIR

DEFAULT_WIDTHS = (32, 64, 128, 256)
DEFAULT_STEPS = 5


def _positive_ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not values or min(values) < 0 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"need distinct integers >= 0, got {text!r}")
    return values


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "coordcheck",
        help="μP's coordinate check: activation RMS against width, standard vs mup",
        description=(
            "Train the spec's model a few steps at several widths under the standard "
            "parametrization and under mup (at the spec's base_width, else the smallest width), "
            "on the spec's data with its optimizer at a constant lr, and write the RMS of every "
            "layer's activations at every step (coordcheck.csv) and its figure (coordcheck.png): "
            "flat in width under mup, growing under the standard parametrization. docs/mup.md."
        ),
    )
    add_spec_arguments(
        parser, "experiment spec (YAML) without ablate axes", "train.optimizer.lr=0.01"
    )
    parser.add_argument(
        "--widths",
        type=_positive_ints,
        default=list(DEFAULT_WIDTHS),
        help=f"model widths (dim), comma-separated (default {','.join(map(str, DEFAULT_WIDTHS))})",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help=f"training steps; steps 0..N are recorded (default {DEFAULT_STEPS})",
    )
    parser.add_argument(
        "--seeds", type=_positive_ints, default=[0], help="seeds, comma-separated (default 0)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"folder of coordcheck.csv and coordcheck.png (default {REPORTS_DIR}/coordcheck/<spec>)",
    )
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    # Imported here so that `minimind --help` and other commands stay quick.
    from pydantic import ValidationError

    from minimind.data import DataError
    from minimind.foundations.writable import unwritable_dir
    from minimind.model.config import MUP_OPTIMIZERS
    from minimind.spec import SpecError, load_spec
    from minimind.spec.errors import first_error

    try:
        spec = load_spec(args.spec, args.override)
    except SpecError as err:
        return fail(str(err))
    if spec.ablate:
        return fail("ablate: coordcheck checks one model; give it a spec without ablate axes")
    if spec.train.optimizer.name not in MUP_OPTIMIZERS:
        return fail(
            f"train.optimizer.name: coordcheck compares with mup, defined for "
            f"{', '.join(MUP_OPTIMIZERS)}, not {spec.train.optimizer.name!r}"
        )
    if args.steps < 1:
        return fail(f"--steps: must be >= 1, got {args.steps}")
    if min(args.widths) < 1:
        return fail(f"--widths: must be >= 1, got {min(args.widths)}")
    model = spec.model_config_obj()
    for width in args.widths:  # every width must make a model before anything trains
        try:
            model.replace(dim=width)
        except ValidationError as err:
            loc, message = first_error(err, type(model))
            return fail(f"--widths: width {width}: model.{'.'.join(map(str, loc))}: {message}")
    out = args.out if args.out is not None else REPORTS_DIR / "coordcheck" / spec.name
    problem = unwritable_dir(out)
    if problem is not None:
        return fail(f"--out: {problem}")

    from minimind.bench.coordcheck import coordinate_check, write

    try:
        rows = coordinate_check(spec, sorted(args.widths), args.steps, args.seeds)
    except DataError as err:
        return fail(str(err))
    title = f"{spec.name}: {spec.train.optimizer.name}, lr {spec.train.optimizer.lr:g}"
    for path in write(rows, out, title):
        print(path)
    return EXIT_OK
