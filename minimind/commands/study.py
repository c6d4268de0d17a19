"""`minimind study plan|train|bench|report MANIFEST`: plan a study's seeds, train its runs, time
its arms' cost, and write its report."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from minimind.commands.options import add_launcher_argument
from minimind.foundations.errors import MinimindError, fail_with
from minimind.foundations.exit_codes import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    exit_code_for_signal,
    fail,
)
from minimind.foundations.paths import DEFAULT_TRACKING_URI, REPORTS_DIR
from minimind.foundations.writable import unwritable_dir

if TYPE_CHECKING:
    from minimind.study.manifest import Study

# `bench`: (1 + 5) x 10 steps of each arm, minutes for the shipped study on one thread
BENCH_ROUNDS, BENCH_STEPS = 5, 10

Action = Callable[[argparse.Namespace, "Study"], int]
Check = Callable[[argparse.Namespace], "str | None"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "study",
        help="run a study's ablations and report them against the literature",
        description=(
            "A study is a manifest such as experiments/study/study.yaml: its arms, its axes of "
            "comparisons with what the literature expects of each, and the streams of steps "
            "that train the runs. `plan` states the seeds each comparison needs, `train` trains "
            "the runs look after look, `bench` times each arm's training cost alone, `report` "
            "writes the per-axis corrected comparisons and their agreement with the literature "
            "as index.html and report.md. Bad input exits with code 2."
        ),
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    plan = _action(
        actions,
        "plan",
        "the seeds each comparison needs, and where the sequential looks stand",
        "print per comparison the seeds it needs at the planned power, a warning where the "
        "sequential design's cap cannot settle it, and where each stands after the runs so far; "
        "trains and writes nothing",
    )
    _tracking_argument(plan)
    plan.set_defaults(func=_on_manifest(_plan))

    train = _action(
        actions,
        "train",
        "train the streams, then the sequential looks",
        "train the manifest's streams side by side (the first look), then look after look the "
        "next seeds of the comparisons still open, until each stops or reaches the cap; run "
        "again, it continues where it stopped. `report` writes the report afterwards",
    )
    _tracking_argument(train)
    train.add_argument(
        "--dry-run",
        action="store_true",
        help="print each stream's steps as they would be launched (--launcher and -o "
        "included); trains, submits and writes nothing",
    )
    add_launcher_argument(train)
    train.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="launcher.KEY=VALUE",
        help="a launcher setting passed to every training step (repeatable): "
        "-o launcher.partition=gpu",
    )
    train.set_defaults(func=_on_manifest(_train, _launch_problem))

    bench = _action(
        actions,
        "bench",
        "time each arm's training step alone, into cost.csv",
        "measure each arm's training cost alone: its runs' trainer (model, optimizer, "
        "precision, batch, threads_per_stream threads), the arms timed side by side in rounds, "
        "written to the report folder's cost.csv, which the report reads; trains nothing into "
        "MLflow. Run it on an otherwise idle machine",
    )
    bench.add_argument(
        "--rounds", type=int, default=BENCH_ROUNDS, help=f"timed rounds (default {BENCH_ROUNDS})"
    )
    bench.add_argument(
        "--steps-per-round",
        type=int,
        default=BENCH_STEPS,
        help=f"consecutive optimizer steps of each arm per round, after one such block of "
        f"warm-up (default {BENCH_STEPS})",
    )
    _report_dir_argument(bench)
    bench.set_defaults(func=_on_manifest(_bench, _bench_problem))

    report = _action(
        actions,
        "report",
        "write the report (index.html, report.md) from the runs in the store",
        "write the report from the runs in the store: per axis the corrected, paired "
        "comparison of its arms, where the sequential design stopped it, the compute "
        "multipliers and budgets, and whether each result agrees with what the literature "
        "expects, as index.html, report.md and CSV files",
    )
    _tracking_argument(report)
    _report_dir_argument(report)
    report.set_defaults(func=_on_manifest(_report))


def _action(
    actions: argparse._SubParsersAction, name: str, summary: str, text: str
) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=summary, description=f"{text}.")
    parser.add_argument("manifest", type=Path, help="study manifest (YAML)")
    return parser


def _tracking_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow tracking URI")


def _report_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--report-dir", type=Path, help="report folder (default: the manifest's report_dir)"
    )


def _on_manifest(action: Action, check: Check | None = None) -> Callable[[argparse.Namespace], int]:
    """`action` on the loaded manifest, after `check` of the options (its one-line problem, if
    any, exits 2 before the manifest is read)."""

    def run(args: argparse.Namespace) -> int:
        from minimind.spec import SpecError
        from minimind.study.manifest import load_study

        if check is not None and (problem := check(args)):
            return fail(problem)
        try:
            study = load_study(args.manifest)
        except SpecError as e:
            return fail(f"{args.manifest}: {e}")
        return action(args, study)

    return run


def _plan(args: argparse.Namespace, study: Study) -> int:
    from minimind.compare import CompareError
    from minimind.study.planning import describe_study_plan, plan_study

    try:
        print(describe_study_plan(study, plan_study(study, args.tracking_uri)))
    except CompareError as e:
        return fail(str(e), e.exit_code)
    return EXIT_OK


def _launch_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with `-o`, in one line: a setting that is not the launcher's, or one that
    no training step would accept (checked here, not in every stream's log after the study has
    started)."""
    from minimind.spec import SpecError

    for override in args.override:
        if not override.startswith("launcher."):
            return f"-o: a study passes launcher settings only, got {override}"
    try:
        _check_launcher_settings(args.override)
    except SpecError as e:
        return str(e)
    return None


def _train(args: argparse.Namespace, study: Study) -> int:
    from minimind.compare import CompareError
    from minimind.study.looks import train_looks
    from minimind.study.streams import Launch, command_line, describe_streams, train
    from minimind.tracking import install_termination_handlers

    launch = Launch(args.launcher, tuple(args.override))
    if args.dry_run:
        print(describe_streams(study, launch))
        return EXIT_OK
    logs = REPORTS_DIR / study.name
    if problem := unwritable_dir(logs):  # before an hour of training, not after it
        return fail(f"the stream logs: {problem}")
    install_termination_handlers()  # SIGTERM and SIGHUP stop the streams as Ctrl-C does
    try:
        failures = train(study, logs, launch) or train_looks(
            study, args.tracking_uri, logs, launch=launch
        )
    except KeyboardInterrupt as exc:
        code = exit_code_for_signal(getattr(exc, "signum", signal.SIGINT))
        if args.launcher == "slurm":
            return fail(
                "interrupted; the Slurm jobs go on: run the same command again to collect "
                "them and continue",
                code,
            )
        return fail("interrupted; the runs ended KILLED (run it again to continue)", code)
    except CompareError as e:
        return fail(str(e), e.exit_code)
    if failures:
        named = "; ".join(
            f"stream {f.stream}: "
            + (f"{command_line(f.step)} (exit {f.exit_code})" if f.step else "its process died")
            for f in failures
        )
        return fail(f"training failed: {named}", EXIT_FAILED)
    print(f"trained; the report: minimind study report {args.manifest}", file=sys.stderr)
    return EXIT_OK


def _report(args: argparse.Namespace, study: Study) -> int:
    from minimind.compare import CompareError
    from minimind.study.analysis import analyse
    from minimind.study.ladders import read_ladders
    from minimind.study.planning import with_standings
    from minimind.study.previous import read_previous
    from minimind.study.report import write_report
    from minimind.study.scale_agreement import scale_agreement

    report_dir = args.report_dir or study.report_dir
    if problem := unwritable_dir(report_dir):
        return fail(f"{'--report-dir' if args.report_dir else 'report_dir'}: {problem}")
    try:
        results, sweeps, runsets = analyse(study, args.tracking_uri)
        results = with_standings(study, results, runsets)
        previous = (
            read_previous(study.previous.findings, study.previous_rows())
            if study.previous
            else None
        )
        pairs = study.scale_of()
        scale = scale_agreement(study, results, runsets, pairs) if pairs else None
    except CompareError as e:
        return fail(str(e), e.exit_code)
    write_report(
        study,
        results,
        sweeps,
        report_dir,
        str(args.manifest),
        read_ladders(study, args.tracking_uri),
        previous,
        scale,
    )
    return EXIT_OK


def _bench_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the cost measurement's settings, in one line; None if nothing."""
    for name, value in (("--rounds", args.rounds), ("--steps-per-round", args.steps_per_round)):
        if value < 1:
            return f"{name} must be >= 1, got {value}"
    return None


def _bench(args: argparse.Namespace, study: Study) -> int:
    """Measure the arms' cost and write it to the report folder's cost.csv."""
    report_dir = args.report_dir or study.report_dir
    if problem := unwritable_dir(report_dir):
        return fail(f"{'--report-dir' if args.report_dir else 'report_dir'}: {problem}")
    from minimind.study.cost import COST_FILE, CostSettings, describe_cost, measure_cost

    try:
        table = measure_cost(study, CostSettings(args.rounds, args.steps_per_round))
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
    """A `SpecError` naming the field of the first `-o launcher.*` that no training step would
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
