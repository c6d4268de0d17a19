"""Interrupts that the garbage collector would swallow reach the work they were meant to stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import weakref

import pytest

from minimind.tracking.lifecycle import Terminated, redeliver_interrupts_lost_in_finalizers

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


def test_the_same_signal_is_sent_again_and_other_unraisables_reach_the_hook_before(
    monkeypatch,
) -> None:
    """Each interrupt comes back as its own signal (Ctrl-C as SIGINT, a `Terminated` as the
    signal it stands for), and an unraisable error of another kind goes to the previous hook."""
    passed: list[type] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: passed.append(u.exc_type))
    redeliver_interrupts_lost_in_finalizers()
    delivered: list[int] = []
    watched = (signal.SIGINT, signal.SIGUSR1)
    previous = {
        s: signal.signal(s, lambda signum, _frame: delivered.append(signum)) for s in watched
    }

    class Finalized:
        pass

    def raiser(exc: BaseException):
        def callback(_ref: object) -> None:
            raise exc

        return callback

    try:
        objects = [Finalized(), Finalized(), Finalized()]
        raised = [KeyboardInterrupt(), Terminated(signal.SIGUSR1), ValueError("in a finalizer")]
        refs = [weakref.ref(o, raiser(e)) for o, e in zip(objects, raised, strict=True)]
        del objects
        deadline = time.monotonic() + 30  # sent 50 ms later from a timer thread
        while len(delivered) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert sorted(delivered) == sorted(watched) and passed == [ValueError], refs


def test_a_termination_crosses_a_process_boundary_as_itself() -> None:
    """A job of `job_slots` that ends by SIGTERM sends its `Terminated` back pickled."""
    import pickle

    back = pickle.loads(pickle.dumps(Terminated(signal.SIGTERM)))
    assert isinstance(back, Terminated) and back.signum == signal.SIGTERM
