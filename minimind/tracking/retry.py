"""Retrying tracking calls through an outage of the tracking server, with a bounded total wait."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy.exc
from mlflow.exceptions import MlflowException

from minimind.foundations.errors import MinimindError
from minimind.foundations.redact import redact

T = TypeVar("T")

# MLflow error codes that a later retry can cure: the server (or its database) is down, busy,
# restarting or rate limiting. A refused connection surfaces as INTERNAL_ERROR. Every other code
# (bad value, missing run, changed param, auth) fails the same way on every retry.
_TRANSIENT_CODES = frozenset(
    {
        "INTERNAL_ERROR",
        "TEMPORARILY_UNAVAILABLE",
        "IO_ERROR",
        "SERVICE_UNDER_MAINTENANCE",
        "WORKSPACE_TEMPORARILY_UNAVAILABLE",
        "DEADLINE_EXCEEDED",
        "RESOURCE_EXHAUSTED",
        "ABORTED",
        "REQUEST_LIMIT_EXCEEDED",
        "COULD_NOT_ACQUIRE_LOCK",
        "UNPARSEABLE_HTTP_ERROR",
    }
)


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the call that raised `exc` may succeed."""
    if isinstance(exc, MlflowException):
        return exc.error_code in _TRANSIENT_CODES
    # OSError covers refused connections, timeouts and requests' exceptions; OperationalError is
    # a locked or unreachable database behind a SQL store.
    return isinstance(exc, (OSError, sqlalchemy.exc.OperationalError))


def notice(message: str) -> None:
    """One line on stderr for the user; tracking trouble must be visible but never fatal."""
    print(f"minimind: tracking: {redact(message)}", file=sys.stderr, flush=True)


class OutageExceeded(MinimindError):
    """The tracking backend stayed unreachable for longer than the outage limit."""


class RetryClock:
    """Calls a function, retrying transient failures with exponential backoff.

    The outage clock starts at the first failure and keeps running across calls until one
    succeeds, so a long outage is measured as one outage however many calls wait on it. Once it
    has lasted `limit_s`, `call` raises `OutageExceeded` without waiting further; setting the
    `give_up` event does the same at once (a second Ctrl-C while ending a run).
    """

    def __init__(
        self,
        limit_s: float,
        label: str,
        initial_delay_s: float = 0.2,
        max_delay_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit_s = limit_s
        self.label = label
        self.initial_delay_s = initial_delay_s
        self.max_delay_s = max_delay_s
        self.give_up = threading.Event()
        self._clock = clock
        self._outage_since: float | None = None

    def call(self, fn: Callable[[], T]) -> T:
        delay = self.initial_delay_s
        while True:
            try:
                result = fn()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                now = self._clock()
                if self._outage_since is None:
                    self._outage_since = now
                    notice(
                        f"{self.label} unreachable ({first_line(exc)}); buffering and retrying "
                        f"for up to {self.limit_s:g} s"
                    )
                remaining = self.limit_s - (now - self._outage_since)
                if remaining <= 0 or self.give_up.is_set():
                    raise OutageExceeded(str(exc)) from exc
                self.give_up.wait(min(delay, remaining))
                delay = min(delay * 2, self.max_delay_s)
                continue
            if self._outage_since is not None:
                notice(
                    f"{self.label} reachable again after {self._clock() - self._outage_since:.1f} s"
                )
                self._outage_since = None
            return result


FIRST_LINE_CHARS = 200


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text, or its type's name; a line longer than
    `FIRST_LINE_CHARS` ends at the last whole word before it, followed by " ...", so that no
    word of the underlying error is cut in two."""
    text = str(exc).strip().splitlines()
    if not text:
        return type(exc).__name__
    line = text[0]
    if len(line) <= FIRST_LINE_CHARS:
        return line
    head = line[: FIRST_LINE_CHARS + 1]
    cut = head.rfind(" ")
    return (head[:cut].rstrip() if cut > 0 else line[:FIRST_LINE_CHARS]) + " ..."
