"""`minimind sync PATH`: import the fallback records of runs whose tracking server was away."""

from __future__ import annotations

import argparse
from pathlib import Path

from minimind.foundations.exit_codes import EXIT_FAILED, EXIT_OK, fail


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sync",
        help="import tracking fallback files into their MLflow runs",
        description=(
            "Replay fallback files (results/tracking-fallback/<run_id>.jsonl, written when the "
            "tracking server stayed unreachable) into their runs. Points already logged are "
            "skipped, so syncing twice is harmless."
        ),
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a file or directory")
    parser.add_argument(
        "--tracking-uri",
        help="send to this tracking URI instead of the one each file was written for",
    )
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    # Imported here so that `minimind --help` and other commands stay quick.
    from minimind.tracking.fallback import FallbackFormatError, replay

    files: list[Path] = []
    for path in args.paths:
        if path.is_dir():
            files += sorted(path.glob("*.jsonl"))
        elif path.is_file():
            files.append(path)
        else:
            return fail(f"{path}: no such file or directory")
    if not files:
        return fail("no fallback files found")
    failed = False
    for file in files:
        try:
            report = replay(file, args.tracking_uri)
        except FallbackFormatError as exc:
            return fail(str(exc))
        except Exception as exc:  # unreachable server, missing run: report, go on with the rest
            fail(f"{file}: {exc}", EXIT_FAILED)
            failed = True
            continue
        print(f"{file}: {report.summary()}")
    return EXIT_FAILED if failed else EXIT_OK
