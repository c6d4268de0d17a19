"""The `minimind` command line: one subcommand module per verb under `minimind/commands/`.

Each command module exposes `add_parser(subparsers)`, which registers its parser and sets
`func(args) -> int` as the handler. Usage errors exit with code 2. `-v`/`--verbose`, before or
after the command, lets other libraries print their informational messages
(`minimind.foundations.verbosity`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from minimind.commands import COMMANDS
from minimind.foundations.redact import redact_log_records, redact_uncaught_exceptions
from minimind.foundations.verbosity import quiet_libraries
from minimind.training.allocator import keep_freed_memory

VERBOSE_HELP = (
    "let MLflow, the torch profiler and other libraries print their informational messages "
    "(database creation, run links, profiler events), which are hidden otherwise"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minimind", description="Ablation studies on small decoder-only language models."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    for subparser in subparsers.choices.values():
        # SUPPRESS: a command's parser leaves the flag alone unless it is given after the command,
        # so `minimind -v run ...` and `minimind run -v ...` both count.
        subparser.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_libraries(args.verbose)  # before any command imports MLflow or torch's profiler
    redact_uncaught_exceptions()  # a database URL's password never reaches the terminal,
    redact_log_records()  # neither in a traceback nor in a library's log line
    keep_freed_memory()  # before any tensor is allocated: see minimind/training/allocator.py
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
