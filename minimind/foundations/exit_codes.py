"""The exit codes of every `minimind` command, and the one-line error a command ends with.

Nothing here imports the rest of the project, so that any layer (commands, the sweep's worker
processes, the tracking lifecycle) can use it.
"""

from __future__ import annotations

import signal
import sys

from minimind.foundations.redact import redact

EXIT_OK = 0
EXIT_FAILED = 1  # the work ran and something failed: a run, a study, a sync
EXIT_BAD_INPUT = 2  # a bad spec, option or file: nothing ran and nothing was written


def exit_code_for_signal(signum: int) -> int:
    """The shell's code for a process stopped by signal `signum`: 128 + its number."""
    return 128 + signum


EXIT_INTERRUPTED = exit_code_for_signal(signal.SIGINT)  # 130, Ctrl-C


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    """Print `error: <message>` to stderr as one line, credentials masked; returns `code` for the
    command to exit with."""
    print(f"error: {redact(message)}", file=sys.stderr)
    return code
