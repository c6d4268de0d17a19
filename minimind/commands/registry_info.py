"""`minimind registry [SLOT]`: list the registered components, their aliases and options."""

from __future__ import annotations

import argparse

from minimind.foundations.exit_codes import EXIT_OK, fail


def format_slot(slot: str) -> list[str]:
    """Lines describing every component of `slot`: name, aliases, then `option: type = default`."""
    import registry  # here, not at the top: it imports torch, which `minimind --help` avoids

    # lr and weight_decay are train.optimizer's own fields, passed to whichever optimizer
    lines = [slot + ("  (each also takes lr and weight_decay)" if slot == "optimizer" else "")]
    for name in registry.choices(slot):
        aliases = registry.aliases(slot, name)
        alias_text = ", ".join(
            alias + (f" [{', '.join(f'{k}={v}' for k, v in fixed.items())}]" if fixed else "")
            for alias, fixed in aliases.items()
        )
        lines.append(f"  {name}" + (f"  (aliases: {alias_text})" if alias_text else ""))
        for option in registry.describe(slot, name):
            lines.append(f"    {option.name}: {option.type} = {option.default!r}")
    return lines


def handle(args: argparse.Namespace) -> int:
    import registry

    try:
        registry.load_plugins(args.plugin)
        slots = [args.slot] if args.slot else list(registry.SLOTS)
        lines = [line for slot in slots for line in format_slot(slot)]
    except registry.RegistryError as err:
        return fail(str(err))
    print("\n".join(lines))
    return EXIT_OK


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "registry",
        help="list the components of each slot with their options",
        description="List the registered components of each slot (or of SLOT): names, aliases "
        "and every option's type and default.",
    )
    parser.add_argument(
        "slot",
        nargs="?",
        metavar="SLOT",
        help="one slot (attention, mlp, ...; a wrong name lists them); all slots if left out",
    )
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first, so that its components are listed (repeatable)",
    )
    parser.set_defaults(func=handle)
