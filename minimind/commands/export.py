"""`minimind export RUN_OR_CHECKPOINT OUT_DIR`: a trained model as a Hugging Face directory."""

from __future__ import annotations

import argparse

from minimind.foundations.errors import MinimindError, fail_with
from minimind.foundations.exit_codes import EXIT_OK, fail
from minimind.foundations.paths import DEFAULT_TRACKING_URI


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a trained model as a Hugging Face transformers directory",
        description=(
            "Write the model of a run (its MLflow child run id) or of a checkpoint (last.pt) as "
            "a directory that transformers loads offline: safetensors weights, config.json, "
            "generation_config.json and the run's tokenizer. Llama or Mixtral where they compute "
            "the model exactly; otherwise with the model code alongside (load with "
            "trust_remote_code=True)."
        ),
    )
    parser.add_argument("source", metavar="RUN_OR_CHECKPOINT", help="a child run id or last.pt")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="the directory to write (new or empty)")
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow tracking URI")
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="a plugin module the run's stored spec may import (repeatable); a stored spec "
        "imports none unless named here",
    )
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    # Imported here so that other commands never import transformers.
    try:
        from minimind.hf.export import export_model
        from minimind.hf.source import load_source
    except ImportError as exc:
        return fail(f"export needs transformers (pip install 'minimind-lab[hf]'): {exc}")
    from minimind.model.lm import MiniMindLM

    try:
        trained = load_source(args.source, args.tracking_uri, args.plugin)
        model = MiniMindLM(trained.config)
        model.load_state_dict(trained.weights)
        arch = export_model(model, trained.tokenizer, args.out_dir)
    except MinimindError as exc:
        return fail_with(exc)
    except ValueError as exc:  # a component without an exact export
        return fail(str(exc))
    except RuntimeError as exc:  # load_state_dict: weights of another shape
        return fail(
            f"{args.source}: weights do not fit the run's model: {str(exc).splitlines()[0]}"
        )
    remote = " (load with trust_remote_code=True)" if arch == "minimind" else ""
    print(f"exported run {trained.run_id} as {arch} to {args.out_dir}{remote}")
    return EXIT_OK
