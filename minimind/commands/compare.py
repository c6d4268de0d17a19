"""`minimind compare`: the seed-aggregated comparison of runs, as a table, file or report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from minimind.foundations.corrections import CORRECTIONS, DEFAULT_CORRECTION
from minimind.foundations.errors import fail_with
from minimind.foundations.exit_codes import EXIT_FAILED, EXIT_OK, fail
from minimind.foundations.extrapolation import DEFAULT_EXTRAPOLATION
from minimind.foundations.paths import DEFAULT_TRACKING_URI, REPORTS_DIR

if TYPE_CHECKING:
    from minimind.compare.domains import DomainSuite
    from minimind.compare.runs import RunSet
    from minimind.compare.table import CompareOptions

FORMATS = ("table", "csv", "markdown", "json")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare",
        help="compare runs across variants, aggregated over seeds",
        description=(
            "Compare the runs of an experiment: one row per variant with mean ± std over seeds "
            "and the delta against a baseline with its interval and p-value, corrected for the "
            "number of comparisons (docs/statistics.md). The runs of a ladder (a spec with "
            "`ladder:`) are compared rung by rung against the baseline arm of each rung, then "
            "across the rungs (fits, extrapolated multiplier, trend); --baseline names an arm "
            "there. By default the "
            "latest `minimind run` invocation (parent run) of the experiment, or the latest "
            "overall when no experiment is given."
        ),
    )
    p.add_argument("experiment", nargs="?", help="MLflow experiment name (the spec's name)")
    # Each names the runs another way: given together, one would be silently ignored.
    chosen = p.add_mutually_exclusive_group()
    chosen.add_argument("--all", action="store_true", help="every run in the experiment(s)")
    chosen.add_argument(
        "--parent",
        metavar="RUN_ID",
        help="the invocation to compare, by its parent run id (default: the latest by start time)",
    )
    chosen.add_argument(
        "--spec-hash",
        metavar="HASH",
        help="the latest invocation of the spec whose hash starts with HASH",
    )
    p.add_argument("--by", metavar="KEY", help="group by a param or tag (default: variant)")
    p.add_argument("--baseline", metavar="VARIANT", help="group the deltas are taken against")
    p.add_argument("--format", choices=FORMATS, default="table", help="output format")
    chosen.add_argument(
        "--filter",
        metavar="EXPR",
        default="",
        help="MLflow search filter, e.g. \"tags.variant = 'x'\"",
    )
    p.add_argument("--experiments", metavar="A,B", help="comma-separated experiments to search")
    p.add_argument("--metric", default="val/bpb", help="the objective (default: val/bpb)")
    p.add_argument(
        "--ci",
        choices=("auto", "welch", "bootstrap"),
        default="auto",
        help="interval of the delta (auto: Welch's t; the percentile bootstrap is too narrow "
        "with few seeds)",
    )
    p.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default=DEFAULT_CORRECTION,
        help="multiple-comparison correction over the variants compared with the baseline "
        "(default: holm; with one comparison there is nothing to correct)",
    )
    p.add_argument(
        "--paired",
        choices=("auto", "on", "off"),
        default="auto",
        help="paired t interval of per-seed differences (auto: when both sides ran the same "
        "seeds; on: over the seeds they share; off: Welch's t)",
    )
    p.add_argument(
        "--noise",
        action="store_true",
        help="also print the seed-to-seed sd of the objective with its interval",
    )
    p.add_argument(
        "--power",
        type=float,
        metavar="DELTA",
        help="print the seeds per arm that detect a difference of DELTA in the objective with "
        "80%% power at the corrected level, from the measured noise",
    )
    p.add_argument(
        "--extrapolate",
        type=float,
        default=DEFAULT_EXTRAPOLATION,
        metavar="FACTOR",
        help="on a ladder, read each comparison's multiplier off the arms' fitted laws at "
        f"FACTOR times the top rung's compute (default: {DEFAULT_EXTRAPOLATION:g})",
    )
    p.add_argument("--report", action="store_true", help="write an HTML/markdown report")
    p.add_argument(
        "--report-dir",
        type=Path,
        help="report folder (default: results/generated/<experiment>, git-ignored)",
    )
    p.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow tracking URI")
    p.set_defaults(func=run_compare)


def _experiments(args: argparse.Namespace) -> list[str]:
    names = [args.experiment] if args.experiment else []
    if args.experiments:
        names += [n.strip() for n in args.experiments.split(",") if n.strip()]
    return list(dict.fromkeys(names))


def _option_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with --tracking-uri or --report-dir, found before reading any run: a store
    MLflow cannot open or that does not answer, a report folder that cannot be written."""
    from minimind.foundations.writable import unwritable_dir
    from minimind.tracking.backend import reachability_problem, store_problem

    problem = store_problem(args.tracking_uri) or reachability_problem(args.tracking_uri)
    if problem is not None:
        return f"--tracking-uri: {problem}"
    if args.report and args.report_dir is not None:
        problem = unwritable_dir(args.report_dir)
        if problem is not None:
            return f"--report-dir: {problem}"
    return None


def _options(args: argparse.Namespace) -> CompareOptions:
    """The comparison the arguments ask for, for a plain comparison or each rung of a ladder."""
    from minimind.compare.table import CompareOptions

    return CompareOptions(
        metric=args.metric,
        by=args.by,
        baseline=args.baseline,
        ci=args.ci,
        correction=args.correction,
        paired=args.paired,
        power_delta=args.power,
    )


def run_compare(args: argparse.Namespace) -> int:
    # Imported here so that `minimind --help` and other commands stay quick.
    from minimind.compare import CompareError, compare, load_runs, render
    from minimind.compare.domains import domain_suite
    from minimind.compare.ladder import is_ladder

    if args.power is not None and not args.power > 0:
        return fail(f"--power: must be a difference > 0, got {args.power}")
    problem = _option_problem(args)
    if problem is not None:
        return fail(problem)
    try:
        runset = load_runs(
            args.tracking_uri,
            _experiments(args),
            all_runs=args.all,
            filter_string=args.filter,
            parent_run_id=args.parent,
            spec_hash=args.spec_hash,
        )
        if runset.runs.empty:
            where = ", ".join(runset.experiments) or "any experiment"
            raise CompareError(
                f"no runs to compare in {where} ({runset.selection})", exit_code=EXIT_FAILED
            )
        if args.by is None and is_ladder(runset):
            return _compare_ladder(args, runset)
        options = _options(args)
        comparison = compare(runset, options)
        suite = domain_suite(runset, options)
    except CompareError as e:
        return fail_with(e)
    if args.format == "table" and sys.stdout.isatty():
        render.print_rich(comparison, args.noise)
    else:
        writers = {
            "table": lambda c: render.to_plain(c, args.noise),
            "csv": render.to_csv,
            "markdown": lambda c: render.to_markdown(c, args.noise),
            "json": render.to_json,
        }
        sys.stdout.write(writers[args.format](comparison))
        if args.format in ("csv", "json") and len(comparison.problems):
            print(
                f"{len(comparison.problems)} failed or incomplete run(s) left out of the statistics.",
                file=sys.stderr,
            )
    if args.format in ("table", "markdown") and suite is not None:
        _suite_section(suite, args.noise)
    from minimind.compare.tuning import comparison_edges

    for edge in comparison_edges(comparison):  # a "tuned" arm that is not
        print(f"warning: {edge}", file=sys.stderr)
    if args.report:
        from minimind.compare.report import write_report

        folder = args.report_dir or REPORTS_DIR / "+".join(runset.experiments)
        index = write_report(comparison, folder, suite=suite)
        print(f"Report written to {index}", file=sys.stderr)
    return EXIT_OK


def _suite_section(suite: DomainSuite, noise: bool) -> None:
    """The held-out suite's section (`data.eval_sets`): Δ per domain with intervals, the
    domains one family; with `noise`, each metric's signal-to-noise ratio (`compare.domains`;
    the report carries the same section and its figure)."""
    from minimind.compare.domains import domain_lines

    print("\nPer domain (data.eval_sets):")
    print(domain_lines(suite.table, suite.snr), end="")
    if noise:
        for metric, (ratio, sd) in suite.snr.items():
            print(
                f"Signal-to-noise of {metric}: {ratio:.3g} (spread of the arms' means over the "
                f"seed-to-seed sd {sd:.3g}; Heineman et al. 2025)"
            )


def _compare_ladder(args: argparse.Namespace, runset: RunSet) -> int:
    """`minimind compare` on a ladder's runs (`compare.ladder`)."""
    from minimind.compare import CompareError, ladder_render
    from minimind.compare.agreement import decision_agreement, with_agreement
    from minimind.compare.ladder import compare_ladder

    try:
        ladder = compare_ladder(runset, _options(args), extrapolate_factor=args.extrapolate)
        agreement = decision_agreement(ladder)
    except CompareError as e:
        return fail_with(e)
    writers = {
        "table": lambda: ladder_render.to_plain(ladder, args.noise),
        "csv": lambda: ladder_render.to_csv(ladder),
        "markdown": lambda: ladder_render.to_markdown(ladder, args.noise),
        "json": lambda: with_agreement(ladder_render.to_json(ladder), agreement),
    }
    sys.stdout.write(writers[args.format]())
    if args.report:
        from minimind.compare.ladder_report import write_ladder_report

        folder = args.report_dir or REPORTS_DIR / "+".join(runset.experiments)
        index = write_ladder_report(ladder, folder, agreement=agreement)
        print(f"Report written to {index}", file=sys.stderr)
    return EXIT_OK
