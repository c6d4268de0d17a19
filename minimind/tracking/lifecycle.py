"""Turning termination signals into an exception, so that runs end KILLED instead of RUNNING."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any, Literal

from minimind.foundations.exit_codes import EXIT_INTERRUPTED, exit_code_for_signal

REDELIVERY_DELAY_S = 0.05
"""How long after an interrupt was lost in a finalizer it is sent again (see
`redeliver_interrupts_lost_in_finalizers`)."""

# How a run ends in MLflow (the statuses this package sets).
Status = Literal["FINISHED", "FAILED", "KILLED"]


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread; handled wherever Ctrl-C is."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    def __reduce__(self) -> tuple[type[Terminated], tuple[int]]:
        # Raised in a job's process and sent back to the dispatcher (`job_slots`): rebuilt from
        # its number, not from the name its message holds.
        return Terminated, (self.signum,)


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
    redeliver_interrupts_lost_in_finalizers()


def redeliver_interrupts_lost_in_finalizers() -> None:
    """Send again an interrupt (Ctrl-C or a `Terminated`) whose exception was raised inside a
    finalizer, so that it is raised in ordinary code and stops the work as any interrupt does.

    A signal handled while the garbage collector runs a weakref callback or `__del__` raises
    there, where Python cannot propagate it: it prints "Exception ignored" and drops it, and
    the process trains on as if never signalled (a sweep worker whose driver was SIGKILLed
    did, until the end of its study). The same signal is sent again from another thread a
    moment later: sent from this thread it would be handled at once, inside this hook, and
    dropped again. Installed once per process; other unraisable errors go to the hook before.
    """
    previous = sys.unraisablehook
    if getattr(previous, "redelivers_interrupts", False):
        return

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            signum = getattr(unraisable.exc_value, "signum", signal.SIGINT)
            timer = threading.Timer(REDELIVERY_DELAY_S, os.kill, (os.getpid(), signum))
            timer.daemon = True
            timer.start()
            return
        previous(unraisable)

    hook.redelivers_interrupts = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def run_until_stopped(work: Callable[[], int], how_to_continue: str, announce: bool = True) -> int:
    """`work()`'s exit code, with SIGTERM/SIGHUP turned into `Terminated` while it runs.

    A stop (Ctrl-C or a signal) prints one line saying `how_to_continue` and exits with the
    shell's code for it (130 for Ctrl-C, 128 + signal number otherwise); the runs it leaves were
    already ended KILLED by their context managers; `announce=False` prints nothing (a DDP rank
    other than 0). The previous handlers are put back.
    """
    watched = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in watched}
    install_termination_handlers(watched)
    try:
        return work()
    except Terminated as exc:
        if announce:
            print(f"\nstopped by {exc}; {how_to_continue}", file=sys.stderr)
        return exit_code_for_signal(exc.signum)
    except KeyboardInterrupt:
        if announce:
            print(f"\ninterrupted; {how_to_continue}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def describe_exit(exc: BaseException) -> tuple[Status, str]:
    """The final status and `failure_reason` of a run left by `exc`."""
    if isinstance(exc, Terminated):
        return "KILLED", f"terminated by {exc}"
    if isinstance(exc, KeyboardInterrupt):
        return "KILLED", "interrupted (KeyboardInterrupt)"
    message = str(exc).strip()
    return "FAILED", f"{type(exc).__name__}: {message}" if message else type(exc).__name__
