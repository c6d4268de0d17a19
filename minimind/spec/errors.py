"""`SpecError` and the mapping of pydantic validation errors onto one-line `path: message` errors.

Pydantic reports a list of errors whose `loc` mixes field names, list indices and union-member
tags. A spec error is one line that names the dotted field path of the first problem, so a user
sees `train.optimizer.lr: must be > 0, got -0.001` rather than a multi-line report.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Sequence
from types import UnionType
from typing import Any, Union

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from minimind.foundations.errors import MinimindError
from minimind.foundations.strict_config import FIELD_ERROR
from registry import did_you_mean

Loc = tuple[str | int, ...]

# Pydantic names union members in `loc` ('str', 'dict[str,any]', 'list[Objective]',
# 'function-after[...]', a model class name) and marks a bad mapping key with '[key]';
# none of them is a field name.
_UNION_TAG = re.compile(r"[a-z-]+\[.*\]|\[key\]|str|int|float|bool|bytes|none|[A-Z]\w*")


class SpecError(MinimindError, ValueError):
    """An invalid spec, override or spec file; `str(e)` is one line `<path>: <message>`."""

    def __init__(self, path: str, message: str) -> None:
        message = " ".join(message.split("\n"))  # a message from user code may span lines
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


def format_path(loc: Sequence[str | int]) -> str:
    """`("ablate", "model.norm", 1, "eps")` -> `"ablate.model.norm[1].eps"`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def show(value: Any) -> str:
    """A short, one-line rendering of a user-supplied value for error messages."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def first_error(err: ValidationError, schema: type[BaseModel] | None = None) -> tuple[Loc, str]:
    """The first problem of `err` as (loc without union tags, one-line message).

    `schema` is the model that was validated; it lets an unknown key list the valid ones.
    """
    errors = err.errors(include_url=False)
    chosen = errors[0]
    tagged = _tag_index(chosen["loc"])
    if tagged is not None:
        # One error per union member: the member that got deepest explains the problem best.
        prefix = tuple(chosen["loc"][:tagged])
        members = [e for e in errors if tuple(e["loc"][:tagged]) == prefix]
        chosen = max(members, key=lambda e: len(_strip_tags(e["loc"])))
        if all(len(e["loc"]) == tagged + 1 for e in members) and len(members) > 1:
            # No member got past the type check: list what the value may be.
            names = [str(e["loc"][tagged]) for e in members]
            kinds = ", ".join(names[:-1]) + f" or {names[-1]}"
            return prefix, f"must be {kinds}, got {show(chosen.get('input'))}"
    loc = _strip_tags(chosen["loc"])
    if chosen["type"] == FIELD_ERROR:
        return loc + tuple(chosen["ctx"]["path"]), chosen["ctx"]["message"]
    return loc, _message(chosen, loc, schema)


def from_validation_error(err: ValidationError, schema: type[BaseModel]) -> SpecError:
    loc, message = first_error(err, schema)
    return SpecError(format_path(loc), message)


def _tag_index(loc: Sequence[str | int]) -> int | None:
    for i, part in enumerate(loc):
        if isinstance(part, str) and _UNION_TAG.fullmatch(part):
            return i
    return None


def _strip_tags(loc: Sequence[str | int]) -> Loc:
    return tuple(p for p in loc if not (isinstance(p, str) and _UNION_TAG.fullmatch(p)))


def _message(error: ErrorDetails, loc: Loc, schema: type[BaseModel] | None) -> str:
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", error["msg"])).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        keys = keys_at(schema, loc[:-1]) if schema is not None else []
        listed = f"; choices: {', '.join(sorted(keys))}" if keys else ""
        return f"unknown key{listed}{did_you_mean(str(loc[-1]), keys)}"
    if kind == "missing":
        return "missing item" if loc and isinstance(loc[-1], int) else "required"
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'", ctx.get("expected", ""))
        return f"unknown value {show(value)}; choices: {', '.join(options)}{did_you_mean(value, options)}"
    if kind in _BOUNDS:
        limit = next(iter(ctx.values()))
        if isinstance(limit, float) and limit.is_integer():
            limit = int(limit)  # "must be > 0", not "> 0.0"
        return f"must be {_BOUNDS[kind]} {limit}, got {show(value)}"
    if kind in ("too_short", "too_long"):
        word = "at least" if kind == "too_short" else "at most"
        n = ctx.get("min_length", ctx.get("max_length"))
        return f"must have {word} {n} item{'s' if n != 1 else ''}, got {ctx.get('actual_length')}"
    if kind in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[kind]}, got {show(value)}"
    return f"{error['msg'][:1].lower()}{error['msg'][1:]}"


_BOUNDS = {
    "greater_than": ">",
    "greater_than_equal": ">=",
    "less_than": "<",
    "less_than_equal": "<=",
}

_TYPE_WORDS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "string_too_short": "a non-empty string",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def keys_at(schema: type[BaseModel], loc: Loc) -> list[str]:
    """Field names of the model reached by following `loc` from `schema` (empty if none)."""
    node = _model_at(schema, loc)
    return list(node.model_fields) if node is not None else []


def takes_extra_keys(schema: type[BaseModel], loc: Loc) -> bool:
    """Whether the model reached by `loc` takes keys beyond its fields (a registry component's
    own options, such as an optimizer's), which only its validation can judge."""
    node = _model_at(schema, loc)
    return node is not None and node.model_config.get("extra") == "allow"


def _model_at(schema: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    node: Any = schema
    for part in loc:
        node = _descend(node, part)
        if node is None:
            return None
    node = _unwrap(node)
    return node if isinstance(node, type) and issubclass(node, BaseModel) else None


def _descend(node: Any, part: str | int) -> Any:
    node = _unwrap(node)
    if isinstance(node, type) and issubclass(node, BaseModel):
        field = node.model_fields.get(str(part))
        return field.annotation if field is not None else None
    args = typing.get_args(node)
    if typing.get_origin(node) in (list, tuple) and args:
        return args[0]
    if typing.get_origin(node) is dict and len(args) == 2:
        return args[1]
    return None


def _unwrap(node: Any) -> Any:
    """`X | None` -> `X`; other unions are left alone."""
    if typing.get_origin(node) in (Union, UnionType):
        members = [a for a in typing.get_args(node) if a is not type(None)]
        return members[0] if len(members) == 1 else node
    return node
