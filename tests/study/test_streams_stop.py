"""A stop of `study train` reaches each step's process: a stream passes it on to the `minimind`
process it waits for (the streams' slots have their own process groups, which a terminal's
Ctrl-C does not reach), and waits for it to end its runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

TIMEOUT_S = 120

STREAM = """
    import sys
    from minimind.study.streams import _launch
    from minimind.tracking import install_termination_handlers

    STEP = '''
    import pathlib, signal, sys, time
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    folder = pathlib.Path(sys.argv[1])
    (folder / "started").touch()
    try:
        time.sleep(600)
    except KeyboardInterrupt:  # Ctrl-C; SIGTERM is passed on as itself and ends it here
        time.sleep(0.5)  # ending its runs: the stream waits for it
        (folder / "stopped").touch()
        sys.exit(130)
    '''

    if __name__ == "__main__":
        install_termination_handlers()  # as a stream's job does
        folder = sys.argv[1]
        with open(folder + "/stream.log", "w") as out:
            try:
                _launch([sys.executable, "-c", STEP, folder], out)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                sys.exit(130)
"""


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_of_a_stream_reaches_its_step_s_process_and_waits_for_it(
    tmp_path: Path, stop: signal.Signals
) -> None:
    script = tmp_path / "stream.py"
    script.write_text(textwrap.dedent(STREAM))
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the step shares the stream's group, not the test's
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not (tmp_path / "started").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(stop)  # to the stream's process alone
    out, _ = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 130 and out.strip() == "interrupted", out
    assert (tmp_path / "stopped").exists()  # passed on, and waited for
