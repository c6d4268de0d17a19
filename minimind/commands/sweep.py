"""`minimind sweep SPEC [-o KEY=VALUE]... [--workers N] [--trials N] [--best] [--dry-run]`: Optuna
studies."""

from __future__ import annotations

import argparse

from minimind.commands.options import (
    add_launcher_argument,
    add_spec_arguments,
    launcher_overrides,
)
from minimind.foundations.exit_codes import fail


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="tune spec fields with Optuna (the spec's sweep: section)",
        description="Run an Optuna study per ablation cell of a spec until it has sweep.trials "
        "finished (complete or pruned) trials; re-running tops it up. Each trial is an MLflow "
        "child run trial-<n> of the study's parent run; the summary, plots and importances go to "
        "the parent run and results/generated/<study>/, the best values to best.yaml. Bad input "
        "exits with code 2. Watch a study with: optuna-dashboard sqlite:///results/optuna.db",
    )
    add_spec_arguments(parser, "experiment spec with a sweep section (YAML)", "sweep.trials=10")
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes on each study, or worker jobs with --launcher slurm "
        "(default: sweep.workers)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        metavar="N",
        help="finished trials each study runs to (default: sweep.trials)",
    )
    parser.add_argument(
        "--best",
        action="store_true",
        help="train nothing: print the best trial(s) and write best.yaml, a runnable spec",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the spec and print each study's target, search space and workers (their "
        "Slurm jobs with --launcher slurm); opens no storage, trains and writes nothing",
    )
    parser.add_argument(
        "--tracking-uri", metavar="URI", help="MLflow tracking URI (default: tracking.uri)"
    )
    add_launcher_argument(parser)
    parser.set_defaults(func=_sweep)


def _sweep(args: argparse.Namespace) -> int:
    from minimind.spec import SpecError, load_spec

    overrides = [*args.override, *launcher_overrides(args)]
    try:  # a bad spec is answered before torch is imported (seconds)
        load_spec(args.spec, overrides)
    except SpecError as err:
        return fail(str(err))
    from minimind.sweep import run_sweep

    return run_sweep(
        args.spec,
        overrides,
        workers=args.workers,
        trials=args.trials,
        tracking_uri=args.tracking_uri,
        best=args.best,
        dry_run=args.dry_run,
    )
