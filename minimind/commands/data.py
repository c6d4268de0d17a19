"""`minimind data prepare SPEC [-o KEY=VALUE]...`: tokenize every distinct `data:` section of a
spec ahead of training (prepare once, then launch many runs on the cached shards)."""

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
    print(plain_table(headers, rows))
    return EXIT_OK
