"""The `minimind` command line: one subcommand module per verb under `minimind/commands/`.

Each command module exposes `add_parser(subparsers)`, which registers its parser and sets
`func(args) -> int` as the handler. Usage errors exit with code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from minimind.allocator import keep_freed_memory
from minimind.commands import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minimind", description="Ablation studies on small decoder-only language models."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    keep_freed_memory()  # before any tensor is allocated: see minimind/allocator.py
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
