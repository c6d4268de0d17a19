"""Subcommand modules of the `minimind` CLI, in the order `minimind --help` lists them."""

from types import ModuleType

COMMANDS: list[ModuleType] = []
