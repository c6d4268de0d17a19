"""Turning termination signals into an exception, so that runs end KILLED instead of RUNNING."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread; handled wherever Ctrl-C is."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def install_termination_handlers(
    signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGHUP),
) -> None:
    """Make `signals` raise `Terminated` in the main thread (call from the main thread).

    With run handles used as context managers (`with tracker.start_child(...) as run:`), a
    `kill`, a closed terminal or a batch scheduler's stop then ends the run KILLED with the signal
    name as `failure_reason`. SIGKILL cannot be caught; `Tracker.resume_run` and
    `Tracker.fail_stale_runs` deal with what it leaves RUNNING.
    """
    for sig in signals:
        signal.signal(sig, _raise_terminated)


def describe_exit(exc: BaseException) -> tuple[str, str]:
    """The final status and `failure_reason` of a run left by `exc`."""
    if isinstance(exc, Terminated):
        return "KILLED", f"terminated by {exc}"
    if isinstance(exc, KeyboardInterrupt):
        return "KILLED", "interrupted (KeyboardInterrupt)"
    message = str(exc).strip()
    return "FAILED", f"{type(exc).__name__}: {message}" if message else type(exc).__name__
