"""Credentials kept out of what minimind prints: `postgresql://user:secret@host/db` is shown as
`postgresql://user:***@host/db` in every error line, tracking notice, traceback and log record
(MLflow's, Optuna's, SQLAlchemy's, urllib3's: every library's).

Nothing here imports the rest of the project, so that any layer can use it.
"""

from __future__ import annotations

import logging
import re
import sys
from types import TracebackType
from typing import Any

# scheme://user:password@ — the password runs to the last '@' before the host (a password may
# itself hold '@' when the user did not percent-encode it).
_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):[^/\s]*@")


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by `***`."""
    return _CREDENTIALS.sub(r"\g<head>:***@", text)


def print_exception(exc: BaseException) -> None:
    """Print `exc`'s traceback to stderr as Python would, credentials masked."""
    import traceback

    print(redact("".join(traceback.format_exception(exc))), file=sys.stderr, end="")


def redact_uncaught_exceptions() -> None:
    """Have an uncaught exception's traceback printed with credentials masked."""

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        print_exception(exc.with_traceback(tb))

    sys.excepthook = hook


def redact_log_records() -> None:
    """Have every log record of this process carry its message, traceback and stack with
    credentials masked, whichever library logs it and whichever handler prints it.

    A record factory rather than a filter on handlers: libraries add handlers of their own
    (MLflow, Optuna) when imported, and a logger without one prints through `logging.lastResort`.
    The factory runs only for a record its logger lets through, so skipped levels cost nothing.
    """
    make_record = logging.getLogRecordFactory()
    if getattr(make_record, "redacts", False):
        return

    def masked_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed format: logging reports it when the record is emitted
            return record
        if redact(message) != message:
            record.msg, record.args = redact(message), ()
        if record.exc_info:
            text = logging.Formatter().formatException(record.exc_info)
            if redact(text) != text:
                record.exc_text = redact(text)  # formatters print exc_text when it is set
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return record

    masked_record.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(masked_record)
