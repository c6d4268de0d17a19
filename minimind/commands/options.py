"""Options that several commands share, so they read and behave the same everywhere."""

from __future__ import annotations

import argparse


def add_spec_arguments(parser: argparse.ArgumentParser, spec_help: str, example: str) -> None:
    """The positional spec path and the repeatable `-o KEY=VALUE` override (into `args.override`)."""
    parser.add_argument("spec", help=spec_help)
    parser.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"set a dotted spec key, value parsed as YAML (repeatable): -o {example}",
    )
