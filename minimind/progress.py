"""What a training run shows while it trains: a rich bar on a terminal, a plain line every
`log_every` steps elsewhere (a log file, CI, a cluster job's output), nothing in other processes.

    with training_progress("base/seed0", total=600, completed=0) as progress:
        progress.advance(step)                                  # every step
        progress.log(step, loss=3.2, lr=3e-3, tokens_per_s=5e3)  # every log_every steps

Only one process shows anything: DDP rank 0, and never a spawned sweep worker, whose output would
interleave with its siblings' (the bar would be garbled).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol, TextIO

from minimind import distributed

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class TrainingProgress(Protocol):
    def advance(self, step: int) -> None:
        """`step` optimizer steps are done."""

    def log(self, step: int, loss: float, lr: float, tokens_per_s: float) -> None:
        """The figures of a log window ending at `step` (tokens_per_s NaN: not measured yet)."""


class Silent:
    """Shows nothing."""

    def advance(self, step: int) -> None:
        pass

    def log(self, step: int, loss: float, lr: float, tokens_per_s: float) -> None:
        pass


class Lines:
    """One line per log window, flushed at once so that a log file follows the run:
    `base/seed0 step 20/600 loss 5.1234 lr 3.00e-03 5,312 tok/s`."""

    def __init__(self, label: str, total: int | None, stream: TextIO) -> None:
        self.prefix = f"{label} " if label else ""
        self.total = f"/{total}" if total is not None else ""
        self.stream = stream

    def advance(self, step: int) -> None:
        pass

    def log(self, step: int, loss: float, lr: float, tokens_per_s: float) -> None:
        print(
            f"{self.prefix}step {step}{self.total} loss {loss:.4f} lr {lr:.2e} "
            f"{_tokens_per_s(tokens_per_s)} tok/s",
            file=self.stream,
            flush=True,
        )


class Bar:
    """A rich progress bar (on stderr) with the last window's loss and tokens/s."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress, self.task = progress, task

    def advance(self, step: int) -> None:
        self.progress.update(self.task, completed=step)

    def log(self, step: int, loss: float, lr: float, tokens_per_s: float) -> None:
        self.progress.update(self.task, loss=f"{loss:.3f}", tok_s=_tokens_per_s(tokens_per_s))


def _tokens_per_s(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}"


def is_terminal() -> bool:
    """Whether both output streams are a terminal, where a redrawn bar reads well."""
    return sys.stdout.isatty() and sys.stderr.isatty()


@contextlib.contextmanager
def training_progress(label: str, total: int | None, completed: int) -> Iterator[TrainingProgress]:
    """The display of one run: `Bar` on a terminal, `Lines` on stderr elsewhere, `Silent` in a
    DDP rank other than 0 and in a spawned sweep worker."""
    if not distributed.is_main_process() or multiprocessing.parent_process() is not None:
        yield Silent()
        return
    if not is_terminal():
        yield Lines(label, total, sys.stderr)
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
        TextColumn("loss {task.fields[loss]}  {task.fields[tok_s]} tok/s"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), refresh_per_second=4) as progress:
        task = progress.add_task(label, total=total, completed=completed, loss="-", tok_s="-")
        yield Bar(progress, task)
