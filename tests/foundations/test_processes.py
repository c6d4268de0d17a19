"""Children that end with their parent: an orphan is sent SIGTERM, and SIGKILL when its handler
does not end it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from minimind.foundations.processes import is_alive, stop_when_orphaned

# A child that ignores SIGTERM (as a handler that hangs, or whose exception was lost, would) and
# would otherwise run for ten minutes.
STUBBORN_CHILD = textwrap.dedent(
    """
    import signal, sys, time
    from minimind.foundations.processes import stop_when_orphaned
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stop_when_orphaned(poll_s=0.1, grace_s=0.5)
    print("watching", flush=True)
    time.sleep(600)
    """
)

# A parent that starts the child, waits until it watches, says its pid and exits.
PARENT = textwrap.dedent(
    """
    import subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline() == "watching\\n"
    print(child.pid, flush=True)
    """
)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_an_orphan_that_survives_its_sigterm_is_killed_after_the_grace():
    parent = subprocess.run(
        [sys.executable, "-c", PARENT, STUBBORN_CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert parent.returncode == 0, parent.stderr
    child = int(parent.stdout)
    deadline = time.monotonic() + 60  # 0.6 s is expected; the rest is room for a loaded machine
    while is_alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    survived = is_alive(child)
    if survived:
        os.kill(child, signal.SIGKILL)
    assert not survived, "the orphan ignored its SIGTERM and was never killed"


def test_a_child_with_its_parent_alive_is_left_alone():
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))
    try:
        stop_when_orphaned(parent_pid=os.getppid(), poll_s=0.01, grace_s=0.01)
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert received == []
