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


def add_launcher_argument(parser: argparse.ArgumentParser) -> None:
    """`--launcher local|slurm`, short for `-o launcher.name=...` (into `args.launcher`)."""
    parser.add_argument(
        "--launcher",
        choices=("local", "slurm"),
        help="where the runs train: here, or as Slurm jobs (the spec's launcher: section, "
        "-o launcher.partition=... and so on)",
    )


def launcher_overrides(args: argparse.Namespace) -> list[str]:
    """The override that `--launcher` stands for (none without it): given after the `-o`s, so
    that it wins over them as the later override does."""
    return [] if args.launcher is None else [f"launcher.name={args.launcher}"]
