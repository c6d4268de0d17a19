"""Credentials kept out of what minimind prints and stores.

    redact("cannot open postgresql://user:secret@host/db")  # '... postgresql://user:***@host/db'
    without_password("postgresql://user:secret@host/db")    # 'postgresql://user@host/db'

`redact` masks the password of every URL in a text: every error line, tracking notice,
traceback and log record (MLflow's, Optuna's, SQLAlchemy's, urllib3's: every library's).
`without_password` is what is recorded of a URI (MLflow params, the `spec.yaml` artifacts,
reports, `best.yaml`, the spec file of Slurm jobs): the process that connects reads the
password from the environment instead (PostgreSQL's libpq: `PGPASSWORD`, `PGPASSFILE` or
`~/.pgpass`; MLflow servers: `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`).

A database URL is read as SQLAlchemy reads one (`dialect+driver://user:password@host:port/db?
key=value`, MLflow's and Optuna's stores): the password runs from the user's ':' to the last '@'
before the query, so it may hold '/', '@' or ':' unencoded; the query's password keys
(`?password=...`, which SQLAlchemy passes to the driver) are secrets too. An `http(s)://` URL
(an MLflow server) is read as requests reads one: its authority ends at the first '/'.

Nothing here imports the rest of the project, so that any layer can use it.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from types import TracebackType
from typing import Any
from urllib.parse import unquote_plus

MASK = "***"

# Where a URL starts in free text (RFC 3986's scheme); its parts are read by `_secrets`.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A URL in free text ends at whitespace or a quote (an error's repr quotes it).
_URL_END = set(" \t\r\n\"'`<>")
# URLs read by the web's rules (MLflow servers): a '/' ends the authority, so it is no password.
_WEB_SCHEMES = frozenset({"http", "https"})
# Query keys whose values are secrets: libpq's and the MySQL drivers' spellings.
SECRET_KEYS = frozenset({"password", "passwd", "pwd", "sslpassword"})


def _secrets(url: str) -> Iterator[tuple[int, int, int, int]]:
    """The secrets of one URL (`url` starts at its scheme): for each, (start, end) of the secret
    and (start, end) of what removing it takes out (`:secret`, `password=secret&`)."""
    head = url.index("://") + 3
    query = url.find("?", head)
    if url[: head - 3].lower() in _WEB_SCHEMES:
        # requests and urllib3 end the authority at the first '/', '?' or '#'.
        authority = re.split(r"[/?#]", url[head:], maxsplit=1)[0]
        at = url.rfind("@", head, head + len(authority))
    else:
        at = url.rfind("@", head, query if query >= 0 else len(url))
        if at < 0 and query >= 0 and url.rfind("@", head) >= 0:
            at = url.rfind("@", head)  # a password holding '?': the last '@' of the whole URL
            query = url.find("?", at)
    if at >= head:
        user, colon, _ = url[head:at].partition(":")
        if colon and "/" not in user:  # `host/path@x` has a path, not a user
            start = head + len(user) + 1
            yield start, at, start - 1, at
    if query < 0:
        return
    position = query + 1
    for pair in url[query + 1 :].split("&"):
        key, equals, value = pair.partition("=")
        end = position + len(pair)
        if equals and unquote_plus(key).lower() in SECRET_KEYS:
            start = position + len(key) + 1
            # The pair and one separator: the one after it, or before it when it is the last.
            cut = (position, end + 1) if end < len(url) else (position - 1, end)
            yield start, end, *cut
        position = end + 1


def _urls(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each URL in `text`: from its scheme to whitespace, a quote or the next
    URL's scheme."""
    starts = [match.start() for match in _SCHEME.finditer(text)]
    for start, following in zip(starts, [*starts[1:], len(text)], strict=True):
        end = start
        while end < following and text[end] not in _URL_END:
            end += 1
        yield start, end


def _rewrite(text: str, cut: bool) -> str:
    """`text` with each URL's secrets masked (`cut` False) or taken out (`cut` True)."""
    if "://" not in text:
        return text
    pieces, done = [], 0
    for start, end in _urls(text):
        for secret_start, secret_end, cut_start, cut_end in _secrets(text[start:end]):
            lo, hi = (cut_start, cut_end) if cut else (secret_start, secret_end)
            pieces += [text[done : start + lo], "" if cut else MASK]
            done = start + hi
    pieces.append(text[done:])
    return "".join(pieces)


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by `***`."""
    return _rewrite(text, cut=False)


def without_password(uri: str) -> str:
    """`uri` (or any text) with the password of every URL in it taken out: what is recorded of a
    URI, so that no stored file, run or report holds a password."""
    return _rewrite(uri, cut=True)


def without_passwords(value: Any) -> Any:
    """`value` (a tree of dicts, lists and scalars, like a spec's) with `without_password`
    applied to every string in it."""
    if isinstance(value, str):
        return without_password(value)
    if isinstance(value, dict):
        return {key: without_passwords(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(without_passwords(item) for item in value)
    return value


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
