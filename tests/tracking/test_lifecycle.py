"""Interrupts that the garbage collector would swallow reach the work they were meant to stop."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# The interrupt is raised inside a weakref callback, where Python prints "Exception ignored"
# and drops it: without redelivery the work runs on to its end and exits 0.
LOST_IN_A_FINALIZER = textwrap.dedent(
    """
    import signal, sys, time, weakref
    from minimind.tracking.lifecycle import Terminated, run_until_stopped

    class Box:
        pass

    def work():
        box = Box()
        def finalizer(_ref):
            raise {raised}
        ref = weakref.ref(box, finalizer)
        del box
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            sum(range(1000))
        return 0

    sys.exit(run_until_stopped(work, "run it again"))
    """
)


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        ("Terminated(signal.SIGTERM)", 128 + 15, "stopped by SIGTERM"),
        ("KeyboardInterrupt()", 130, "interrupted"),
    ],
)
def test_an_interrupt_raised_in_a_finalizer_still_stops_the_work(raised, code, line):
    script = LOST_IN_A_FINALIZER.format(raised=raised)
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert result.returncode == code, result.stderr
    assert result.stderr.strip().endswith(f"{line}; run it again"), result.stderr
    assert "Exception ignored" not in result.stderr
