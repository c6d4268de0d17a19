"""Credentials kept out of what minimind prints: `postgresql://user:secret@host/db` is shown as
`postgresql://user:***@host/db` in every error line and tracking notice.

Nothing here imports the rest of the project, so that any layer can use it.
"""

from __future__ import annotations

import re
import sys
from types import TracebackType

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
