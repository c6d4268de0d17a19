"""Subcommand modules of the `minimind` CLI, in the order `minimind --help` lists them."""

from types import ModuleType

from minimind.commands import (
    bench,
    compare,
    coordcheck,
    data,
    export,
    registry_info,
    run,
    study,
    sweep,
    sync,
)

COMMANDS: list[ModuleType] = [
    run,
    sweep,
    data,
    compare,
    study,
    bench,
    coordcheck,
    export,
    registry_info,
    sync,
]
