"""The one error type of the data package."""

from __future__ import annotations

from minimind.foundations.errors import MinimindError


class DataError(MinimindError, ValueError):
    """A corpus or tokenizer that cannot be prepared; `str(e)` is one line `<field>: <message>`."""

    def __init__(self, message: str, field: str = "data.corpus") -> None:
        self.field = field
        self.message = " ".join(message.split("\n"))
        super().__init__(f"{field}: {self.message}")

    def __reduce__(self):  # raised in worker processes and re-raised in the parent
        return type(self), (self.message, self.field)
