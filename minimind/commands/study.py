"""`minimind study`: train a study's runs (`--train`) and write its report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from minimind.commands.options import add_launcher_argument
from minimind.foundations.errors import MinimindError, fail_with
from minimind.foundations.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, fail
from minimind.foundations.paths import DEFAULT_TRACKING_URI, REPORTS_DIR
from minimind.foundations.writable import unwritable_dir

if TYPE_CHECKING:
    from minimind.study.manifest import Study

# `--bench`: (1 + 5) x 10 steps of each arm, minutes for the shipped study on one thread
BENCH_ROUNDS, BENCH_STEPS = 5, 10


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "study",
        help="run a study's ablations and report them against the literature",
        description=(
            "Report a study (a manifest such as experiments/study/study.yaml): per axis the "
            "corrected, paired comparison of its arms, the compute multipliers and budgets, "
            "and whether each result agrees with what the literature expects, as index.html "
            "and report.md. With --train, first run the manifest's training commands (its "
            "streams side by side), then the sequential design's further looks. Bad input exits "
            "with code 2."
        ),
    )
    p.add_argument("manifest", type=Path, help="study manifest (YAML)")
    p.add_argument(
        "--train",
        action="store_true",
        help=(
            "train first: the manifest's streams (the first look), then look after look the next "
            "seeds of the comparisons still open, until each stops or reaches the cap; run "
            "again, it continues where it stopped"
        ),
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help=(
            "print per comparison the seeds it needs at the planned power, a warning where the "
            "sequential design's cap cannot settle it, and where each stands after the runs so "
            "far; trains and writes nothing"
        ),
    )
    p.add_argument(
        "--bench",
        action="store_true",
        help=(
            "measure each arm's training cost alone: its runs' trainer (model, optimizer, "
            "precision, batch, threads_per_stream threads), the arms timed side by side in "
            "rounds, written to the report folder's cost.csv, which the report reads; trains "
            "nothing into MLflow. Run it on an otherwise idle machine"
        ),
    )
    p.add_argument(
        "--rounds",
        type=int,
        help=f"with --bench: timed rounds (default {BENCH_ROUNDS})",
    )
    p.add_argument(
        "--steps-per-round",
        type=int,
        help=f"with --bench: consecutive optimizer steps of each arm per round, after one such "
        f"block of warm-up (default {BENCH_STEPS})",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="with --train: print each stream's training commands as they would be launched "
        "(--launcher and -o included); trains, submits and writes nothing",
    )
    p.add_argument(
        "--report-dir", type=Path, help="report folder (default: the manifest's report_dir)"
    )
    p.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow tracking URI")
    add_launcher_argument(p)
    p.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="launcher.KEY=VALUE",
        help="a launcher setting passed to every training command (repeatable): "
        "-o launcher.partition=gpu",
    )
    p.set_defaults(func=run_study)


def run_study(args: argparse.Namespace) -> int:
    from minimind.spec import SpecError
    from minimind.study.manifest import load_study

    for override in args.override:
        if not override.startswith("launcher."):
            return fail(f"-o: a study passes launcher settings only, got {override}")
    if args.dry_run and not args.train:
        return fail("--dry-run: lists what --train would launch; add --train")
    if problem := _bench_problem(args):
        return fail(problem)
    try:  # here, not in every stream command's log after the study has started
        _check_launcher_settings(args.override)
    except SpecError as e:
        return fail(str(e))
    try:
        study = load_study(args.manifest)
    except SpecError as e:
        return fail(f"{args.manifest}: {e}")
    if args.bench:
        return _bench(study, args.report_dir or study.report_dir, args)
    if args.dry_run:
        from minimind.study.streams import Launch, describe_streams

        print(describe_streams(study, Launch(args.launcher, tuple(args.override))))
        return EXIT_OK
    from minimind.compare import CompareError

    if args.plan:
        from minimind.study.planning import describe_study_plan, plan_study

        try:
            print(describe_study_plan(study, plan_study(study, args.tracking_uri)))
        except CompareError as e:
            return fail(str(e), e.exit_code)
        return EXIT_OK
    report_dir = args.report_dir or study.report_dir
    logs = REPORTS_DIR / study.name
    # Both checked before an hour of training, not found unwritable after it.
    outputs = [("--report-dir", report_dir), *([("the stream logs", logs)] if args.train else [])]
    for what, folder in outputs:
        if problem := unwritable_dir(folder):
            return fail(f"{what}: {problem}")
    if args.train:
        from minimind.study.looks import train_looks
        from minimind.study.streams import Launch, train

        launch = Launch(args.launcher, tuple(args.override))
        try:
            failures = train(study, logs, launch) or train_looks(
                study, args.tracking_uri, logs, launch=launch
            )
        except KeyboardInterrupt:
            if args.launcher == "slurm":
                return fail(
                    "interrupted; the Slurm jobs go on: run the same command again to collect "
                    "them and continue",
                    EXIT_INTERRUPTED,
                )
            return fail(
                "interrupted; the runs ended KILLED (run it again to continue)", EXIT_INTERRUPTED
            )
        except CompareError as e:
            return fail(str(e), e.exit_code)
        if failures:
            named = "; ".join(
                f"stream {f.stream}: {f.command} (exit {f.exit_code})" for f in failures
            )
            return fail(f"training failed: {named}", EXIT_FAILED)
    from minimind.study.analysis import analyse
    from minimind.study.ladders import read_ladders
    from minimind.study.planning import with_standings
    from minimind.study.report import write_report

    try:
        results, sweeps, runsets = analyse(study, args.tracking_uri)
        results = with_standings(study, results, runsets)
    except CompareError as e:
        return fail(str(e), e.exit_code)
    write_report(
        study,
        results,
        sweeps,
        report_dir,
        str(args.manifest),
        read_ladders(study, args.tracking_uri),
    )
    return EXIT_OK


def _bench_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with `--bench` and its settings as given, in one line; None if nothing."""
    settings = {"--rounds": args.rounds, "--steps-per-round": args.steps_per_round}
    given = [name for name, value in settings.items() if value is not None]
    if not args.bench:
        return f"{given[0]}: sets the cost measurement; add --bench" if given else None
    others = [flag for flag in ("train", "plan", "launcher") if getattr(args, flag)]
    if others or args.override:
        clash = f"--{others[0]}" if others else "-o"
        return f"--bench: measures the arms' cost alone, without training; drop {clash}"
    for name, value in settings.items():
        if value is not None and value < 1:
            return f"{name} must be >= 1, got {value}"
    return None


def _bench(study: Study, report_dir: Path, args: argparse.Namespace) -> int:
    """`--bench`: measure the arms' cost and write it to `report_dir`/cost.csv."""
    if problem := unwritable_dir(report_dir):
        return fail(f"{'--report-dir' if args.report_dir else 'report_dir'}: {problem}")
    from minimind.study.cost import COST_FILE, CostSettings, describe_cost, measure_cost

    rounds = BENCH_ROUNDS if args.rounds is None else args.rounds
    steps = BENCH_STEPS if args.steps_per_round is None else args.steps_per_round
    try:
        table = measure_cost(study, CostSettings(rounds, steps))
    except MinimindError as e:
        return fail_with(e)
    except KeyboardInterrupt:  # nothing written: the table is written whole or not at all
        print("interrupted: no cost written", file=sys.stderr)
        return EXIT_INTERRUPTED
    path = report_dir / COST_FILE
    table.write(path)
    print(describe_cost(table))
    print(f"Arm cost written to {path}", file=sys.stderr)
    return EXIT_OK


def _check_launcher_settings(overrides: list[str]) -> None:
    """A `SpecError` naming the field of the first `-o launcher.*` that no training command would
    accept (the launcher section they make, validated as a spec's is)."""
    from pydantic import ValidationError

    from minimind.spec import SpecError
    from minimind.spec.errors import from_validation_error
    from minimind.spec.launcher import LauncherConfig
    from minimind.spec.loader import parse_override
    from minimind.spec.schema import apply

    tree: dict[str, object] = {}
    for text in overrides:
        key, value, _ = parse_override(text)
        tree = apply(tree, {key: value})
    try:
        LauncherConfig.model_validate(tree.get("launcher", {}))
    except ValidationError as err:
        problem = from_validation_error(err, LauncherConfig)
        raise SpecError(f"launcher.{problem.path}", problem.message) from None
