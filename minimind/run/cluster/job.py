"""What a Slurm job runs: one `minimind` command in a child process, stopped and requeued on
Slurm's warning signal.

submitit runs `MinimindJob(argv)()` in the job and, on the signal it asks Slurm to send
`launcher.signal_delay_s` before the time limit (or on a preemption), calls `checkpoint()`,
which requeues the job with what it returns. The command runs in a child process, not in
submitit's, so that it can be torchrun's ranks, so that the signal handlers of minimind (SIGTERM
ends the runs KILLED) and of submitit (SIGTERM ignored, SIGUSR2 checkpoints) never meet, and so
that `checkpoint()` can stop it: SIGTERM, then its run ends KILLED with its last checkpoint on
disk, from which the requeued job's `--resume`-path continues bit for bit. The child ignores the
warning signal itself (Slurm signals every process of the job step).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

STOP_GRACE_S = 60.0  # the command's time to end its runs after SIGTERM, before SIGKILL


def _ignore_warning_signal() -> None:
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


class MinimindJob:
    """`python -m minimind <argv>` as a job; raises when the command fails, so that Slurm
    records the job FAILED."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self._process: subprocess.Popen[bytes] | None = None

    def __getstate__(self) -> dict[str, Any]:  # pickled for the job: the process stays here
        return {"argv": self.argv}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.argv = state["argv"]
        self._process = None

    def __call__(self) -> int:
        command = [sys.executable, "-m", "minimind", *self.argv]
        print("$ " + " ".join(command), flush=True)
        self._process = subprocess.Popen(command, preexec_fn=_ignore_warning_signal)
        code = self._process.wait()
        if code != 0:
            raise RuntimeError(f"minimind {self.argv[0]} exited with code {code}")
        return code

    def checkpoint(self) -> Any:
        """Stop the command (its run ends KILLED, its checkpoint kept) and requeue the job."""
        from submitit.helpers import DelayedSubmission

        if self._process is not None:
            _stop(self._process)
        return DelayedSubmission(MinimindJob(self.argv))


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, `STOP_GRACE_S` to end, then SIGKILL; reaped with `os.waitpid`, not `Popen.wait`:
    this runs in a signal handler that interrupted `Popen.wait` in `__call__`, which holds the
    lock a second `Popen.wait` would wait on forever."""
    if process.returncode is not None:
        return
    process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    try:
        while time.monotonic() < deadline:
            if os.waitpid(process.pid, os.WNOHANG)[0]:
                return
            time.sleep(0.2)
        process.kill()
        os.waitpid(process.pid, 0)
    except ChildProcessError:  # already reaped
        return
