"""`minimind bench`: speed and memory figures against peers, measured side by side.

minimind bench --suite all --json results/bench.json
minimind bench --suite model --suite moe --device cuda
minimind bench --quick            # every suite at its smallest size: a smoke run
"""

from __future__ import annotations

import argparse
import os

from minimind.foundations.exit_codes import EXIT_FAILED, EXIT_OK, fail

DEFAULT_ROUNDS, QUICK_ROUNDS = 5, 3
# The suites measure CUDA (its memory statistics) or the CPU (its allocations), not MPS.
BENCH_DEVICES = ("cuda", "cpu")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from minimind.bench import SUITES

    parser = subparsers.add_parser(
        "bench",
        help="benchmark minimind against its peers (HF transformers, bare loops)",
        description=(
            "Time alternating candidates after a warm-up and report the median of per-round "
            "ratios, each beside its target. Ratios are robust to a busy machine; absolute "
            "figures are not."
        ),
    )
    parser.add_argument(
        "--suite",
        action="append",
        choices=(*SUITES, "all"),
        help="suite to run (repeatable; default: all)",
    )
    parser.add_argument("--device", choices=("auto", *BENCH_DEVICES), default="auto")
    parser.add_argument(
        "--quick", action="store_true", help="smallest sizes and fewer rounds (smoke run)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch intra-op threads, fixed for the whole run (default: all CPUs)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help=f"timed rounds per comparison (default {DEFAULT_ROUNDS}; {QUICK_ROUNDS} with --quick)",
    )
    parser.add_argument(
        "--steps-per-round",
        type=int,
        help="consecutive steps timed as one block per round (default: 12 on CUDA, 1 elsewhere)",
    )
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import torch  # here, not at the top, so that `minimind --help` does not import torch

    from minimind.bench import SUITES, BenchContext, run_suites
    from minimind.training.device import resolve_device

    rounds = args.rounds
    if rounds is None:
        rounds = QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS
    if rounds < 1 or args.threads < 1:
        return fail("--rounds and --threads must be >= 1")
    if args.steps_per_round is not None and args.steps_per_round < 1:
        return fail("--steps-per-round must be >= 1")
    try:
        device = resolve_device(args.device, BENCH_DEVICES)
    except ValueError as err:
        return fail(f"--device: {err}")
    suites = (
        list(SUITES) if not args.suite or "all" in args.suite else list(dict.fromkeys(args.suite))
    )
    torch.set_num_threads(args.threads)
    report = run_suites(
        suites,
        BenchContext(device, quick=args.quick, rounds=rounds, steps_per_round=args.steps_per_round),
    )
    report.print()
    if args.json:
        report.write_json(args.json)
    return EXIT_FAILED if report.failures else EXIT_OK
