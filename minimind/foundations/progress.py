"""What a long task shows while it works (training, tokenizing): a rich bar on a terminal, a
plain line per report elsewhere (a log file, CI, a cluster job's output), nothing in a process
that must keep quiet.

    with display("tokenizing corpus", total=40, completed=0, transient=True) as shown:
        shown.advance(k)                                # the bar's position, nothing elsewhere
        shown.report(k, status="1,024 docs", line="tokenized corpus: piece 1/40, 1,024 docs")

A spawned process (a sweep worker, a tokenizing worker) never shows anything: its output would
interleave with its siblings' (a bar would be garbled). The caller says when its own process
keeps quiet too (`quiet`: a DDP rank other than 0).

`training_progress` is a training run's display: the bar shows the last window's loss and
tokens/s, a line its step, loss, learning rate and tokens/s.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class Display(Protocol):
    def advance(self, completed: int) -> None:
        """`completed` units of the total are done."""

    def report(self, completed: int, status: str, line: str) -> None:
        """`completed` units are done: a bar shows `status` beside itself, elsewhere `line` is
        printed."""


class Silent:
    """Shows nothing."""

    def advance(self, completed: int) -> None:
        pass

    def report(self, completed: int, status: str, line: str) -> None:
        pass


class Lines:
    """One line per report, flushed at once so that a log file follows the task."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def advance(self, completed: int) -> None:
        pass

    def report(self, completed: int, status: str, line: str) -> None:
        print(line, file=self.stream, flush=True)


class Bar:
    """A rich progress bar (on stderr) with the last report's status beside it."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress, self.task = progress, task

    def advance(self, completed: int) -> None:
        self.progress.update(self.task, completed=completed)

    def report(self, completed: int, status: str, line: str) -> None:
        self.progress.update(self.task, completed=completed, status=status)


def is_terminal() -> bool:
    """Whether both output streams are a terminal, where a redrawn bar reads well."""
    return sys.stdout.isatty() and sys.stderr.isatty()


@contextlib.contextmanager
def display(
    label: str,
    total: int | None,
    completed: int,
    *,
    quiet: bool = False,
    transient: bool = False,
    status: str = "",
) -> Iterator[Display]:
    """`Bar` on a terminal (labelled `label`, `total` units, `completed` done, showing `status`
    until the first report; erased at the end when `transient`), `Lines` on stderr elsewhere,
    `Silent` when `quiet` and in a spawned process."""
    if quiet or multiprocessing.parent_process() is not None:
        yield Silent()
        return
    if not is_terminal():
        yield Lines(sys.stderr)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
    )
    console = Console(stderr=True)
    with Progress(*columns, console=console, transient=transient, refresh_per_second=4) as bar:
        yield Bar(bar, bar.add_task(label, total=total, completed=completed, status=status))


class TrainingProgress:
    """A training run's display: `advance(step)` every step, `log(...)` every log window."""

    def __init__(self, shown: Display, label: str, total: int | None) -> None:
        self.shown = shown
        self.prefix = f"{label} " if label else ""
        self.total = f"/{total}" if total is not None else ""

    def advance(self, step: int) -> None:
        """`step` optimizer steps are done."""
        self.shown.advance(step)

    def log(self, step: int, loss: float, lr: float, tokens_per_s: float) -> None:
        """The figures of a log window ending at `step` (tokens_per_s NaN: not measured yet):
        `loss 5.123  5,312 tok/s` beside the bar, or the line
        `base/seed0 step 20/600 loss 5.1234 lr 3.00e-03 5,312 tok/s`."""
        rate = _tokens_per_s(tokens_per_s)
        self.shown.report(
            step,
            status=f"loss {loss:.3f}  {rate} tok/s",
            line=f"{self.prefix}step {step}{self.total} loss {loss:.4f} lr {lr:.2e} {rate} tok/s",
        )


def _tokens_per_s(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}"


@contextlib.contextmanager
def training_progress(
    label: str, total: int | None, completed: int, *, quiet: bool = False
) -> Iterator[TrainingProgress]:
    """The display of one run (`display`); `quiet` in a DDP rank other than 0."""
    with display(label, total, completed, quiet=quiet, status="loss -  - tok/s") as shown:
        yield TrainingProgress(shown, label, total)
