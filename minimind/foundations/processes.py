"""Processes: children that end with their parent (a `kill -9` of the parent leaves no orphans),
and whether a process recorded by id and start time is still alive (an id alone may be reused)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

ORPHAN_POLL_S = 1.0  # how soon a child notices that its parent died
ORPHAN_GRACE_S = 30.0  # how long an orphan's SIGTERM handler may take before SIGKILL


def stop_when_orphaned(
    parent_pid: int | None = None,
    poll_s: float = ORPHAN_POLL_S,
    grace_s: float = ORPHAN_GRACE_S,
) -> None:
    """SIGTERM this process once its parent (`parent_pid`, default the current one) is gone,
    and SIGKILL it if it is still alive `grace_s` later.

    A SIGKILLed parent runs no handler to stop its children, and a child busy tokenizing or
    training never reads the pipe that would tell it. A polling daemon thread rather than Linux's
    PR_SET_PDEATHSIG: it works on every OS, and the SIGTERM reaches whatever handler the child
    installed (a sweep worker ends its trial and run; a tokenization worker just ends). The
    SIGKILL is the escalation the dead parent can no longer do: a handler that hangs, or an
    interrupt lost on its way, must not leave an orphan training to the end of its study (what
    a SIGKILL leaves RUNNING, the next invocation fails as stale).
    """
    watched = os.getppid() if parent_pid is None else parent_pid

    def watch() -> None:
        while os.getppid() == watched:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="minimind-orphan-watch", daemon=True).start()


def _stat_fields(pid: int) -> list[str] | None:
    """Process `pid`'s /proc stat fields from its state on (field 3), or None where they cannot
    be read (another OS, or no such process). The command name (field 2) may hold spaces and
    parentheses: the fields are counted after its ")"."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def start_time(pid: int) -> str | None:
    """When process `pid` started, in clock ticks since boot (Linux's /proc), or None where that
    cannot be read (another OS, or no such process). With the pid it names one process for good:
    the kernel reuses pids, never a (pid, start time) pair."""
    fields = _stat_fields(pid)
    return None if fields is None else fields[19]


def is_alive(pid: int, started: str | None = None) -> bool:
    """Whether process `pid` is running and, when `started` is known, is the one that started
    then. A zombie is not: it has exited and only waits to be reaped by its parent."""
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        pass
    fields = _stat_fields(pid)
    if fields is None:  # no procfs (macOS): existence is all that can be told
        return True
    if fields[0] in ("Z", "X"):
        return False
    return started is None or fields[19] == started
