"""`StrictNumbers`: the base of every spec section, so degenerate numbers fail validation.

Pydantic's lax mode reads `steps: true` as 1 and accepts `lr: .inf`; a spec means neither. Here
a number field rejects booleans and non-finite values, naming the field like any other error.
"""

from __future__ import annotations

import typing
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


class StrictNumbers(BaseModel):
    """A model whose number fields reject booleans and `inf`/`nan`."""

    model_config = ConfigDict(allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and field and not _admits_bool(field.annotation):
                    field_error((name,), f"must be a number, not {str(value).lower()}")
        return data
