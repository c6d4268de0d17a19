"""Downstream task files: one JSON object per line,

    {"context": "The capital of France is", "continuations": [" Paris", " Rome"], "gold": 0}

`context` is a non-empty string, `continuations` two or more strings, `gold` the index of the
right one. The model scores log P(continuation | context) for each, with the text split into
tokens as lm-eval splits it (`encode_pair`), so lm-eval's loglikelihood requests and these are
the same numbers. A task takes its first `limit` items (file order), so every evaluation and every
run scores the same ones. Nothing here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from minimind.foundations.errors import MinimindError


class TaskFileError(MinimindError, ValueError):
    """A task file that cannot be read or breaks the format; the message names the line."""


@dataclass(frozen=True)
class Item:
    context: str
    continuations: tuple[str, ...]
    gold: int


@dataclass(frozen=True)
class Task:
    name: str
    items: tuple[Item, ...]


def load_task(name: str, path: str | Path, limit: int | None) -> Task:
    """The first `limit` items (all with None) of the JSONL file at `path`; TaskFileError."""
    path = Path(path).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"{path}: cannot be read ({exc})") from exc
    items = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        items.append(_item(line, f"{path}:{number}"))
        if limit is not None and len(items) == limit:
            break
    if not items:
        raise TaskFileError(f"{path}: no items")
    return Task(name, tuple(items))


def _item(line: str, where: str) -> Item:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TaskFileError(f"{where}: not JSON ({exc.msg})") from exc
    if not isinstance(row, dict) or set(row) != {"context", "continuations", "gold"}:
        raise TaskFileError(f"{where}: expected exactly the keys context, continuations, gold")
    context, continuations, gold = row["context"], row["continuations"], row["gold"]
    # A context of only spaces would be scored from no tokens at all (`encode_pair` moves its
    # spaces to the continuation), which the scoring cannot do: the first token needs a context.
    if not isinstance(context, str) or not context.strip():
        raise TaskFileError(f"{where}: context must be a string with a non-space character")
    if (
        not isinstance(continuations, list)
        or len(continuations) < 2
        or not all(isinstance(c, str) and c for c in continuations)
    ):
        raise TaskFileError(f"{where}: continuations must be two or more non-empty strings")
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(continuations):
        raise TaskFileError(f"{where}: gold must be an index into continuations")
    return Item(context, tuple(continuations), gold)


def encode_pair(
    tokenizer: Tokenizer, context: str, continuation: str
) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) as lm-eval's `_encode_pair`: trailing spaces of the context
    move to the continuation, the whole text is encoded once and split after the context's ids,
    so the continuation's first token is the one the whole text gives there."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer.encode(context + continuation).ids
    context_ids = tokenizer.encode(context).ids
    return context_ids, whole[len(context_ids) :]


def longest_request(task: Task, tokenizer: Tokenizer) -> int:
    """Tokens of the task's longest context + continuation."""
    return max(
        sum(len(part) for part in encode_pair(tokenizer, item.context, continuation))
        for item in task.items
        for continuation in item.continuations
    )
