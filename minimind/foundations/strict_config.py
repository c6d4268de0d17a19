"""`StrictNumbers`: the base of every spec section, so degenerate numbers fail validation.

Pydantic's lax mode reads `steps: true` as 1 and accepts `lr: .inf`; a spec means neither. Here
a number field rejects booleans and non-finite values, naming the field like any other error.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Iterable
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

Loc = tuple[str | int, ...]

# Error type of `field_error`: a validator that knows the exact path of the field it rejects.
FIELD_ERROR = "spec_field"


def field_error(path: Loc, message: str) -> NoReturn:
    """Raise, from inside a validator, an error that `from_validation_error` puts at `path`.

    `path` is relative to the model whose validator raises (pydantic prepends the outer loc).
    """
    raise PydanticCustomError(FIELD_ERROR, "{message}", {"message": message, "path": tuple(path)})


def _admits_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_admits_bool(arg) for arg in typing.get_args(annotation))


def _members(annotation: Any) -> list[Any]:
    """The types `annotation` stands for: a union's members, an `Annotated` type's own."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _boolean_in(annotation: Any, value: Any) -> tuple[Loc, bool] | None:
    """Where in `value` a boolean stands for a number (`annotation` admits none there), and the
    boolean: () for `value` itself, (i,) for an item of a list, (key,) for a value of a
    mapping; else None."""
    if isinstance(value, bool):
        return None if _admits_bool(annotation) else ((), value)
    members = _members(annotation)
    if isinstance(value, list):
        lists = [m for m in members if typing.get_origin(m) in (list, collections.abc.Sequence)]
        items = [typing.get_args(m)[0] for m in lists if typing.get_args(m)]
        entries: Iterable[tuple[Any, Any]] = enumerate(value)
    elif isinstance(value, dict):
        maps = [m for m in members if typing.get_origin(m) in (dict, collections.abc.Mapping)]
        items = [typing.get_args(m)[1] for m in maps if typing.get_args(m)]
        entries = value.items()
    else:
        return None
    if len(items) != 1:  # not a list or mapping the annotation describes alone
        return None
    for key, item in entries:
        found = _boolean_in(items[0], item)
        if found is not None:
            return (key, *found[0]), found[1]
    return None


class StrictNumbers(BaseModel):
    """A model whose number fields (and the numbers in its lists and mappings: `seeds: [true]`)
    reject booleans and `inf`/`nan`."""

    model_config = ConfigDict(allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(name, str) else None
                found = _boolean_in(field.annotation, value) if field else None
                if found is not None:
                    where, boolean = found
                    field_error((name, *where), f"must be a number, not {str(boolean).lower()}")
        return data
