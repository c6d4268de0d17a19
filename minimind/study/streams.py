"""`minimind study train`: the manifest's streams of steps, side by side.

Each stream is a job of `foundations.job_slots` (the mechanism of `run --jobs` and a sweep's
workers) with the study's `threads_per_stream` as its place: it runs its steps in order, each in
a child process of this interpreter (`minimind run` or `minimind sweep`, which inherits the
slot's `OMP_NUM_THREADS`); a stream stops at its first failing step and the others go on. A
stop of the study is passed on to each step's process, which ends its runs KILLED. Each step's output goes to the stream's
log file, and one line per step start and end to stderr, so that a long study shows its progress
on a terminal and in a log alike.

This is the one module that turns a step into a command line (`step_argv`, and `command_line`
to show one). A `Launch` (`minimind study train --launcher slurm -o launcher...`) adds its
arguments to each training step (a run, a sweep that trains): every (arm, seed) is then a Slurm
job. Every run gets `--resume --restart`, here or on Slurm, so that the study run again after a
stop reopens each step's invocation: it skips the runs that finished, continues the interrupted
ones from their checkpoints, trains anew (in a new run) one interrupted before its first
checkpoint or whose checkpoint stayed on another machine (the stores travel, checkpoints do not)
and, on Slurm, waits for the jobs still queued or running and submits the runs that did not
finish (a sweep tops its studies up by itself).
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from minimind.foundations.exit_codes import EXIT_FAILED
from minimind.foundations.job_slots import Job, Placement, Unfinished, run_in_slots
from minimind.study.manifest import Study
from minimind.study.steps import RunStep, Step


@dataclass(frozen=True)
class Failure:
    stream: int
    step: Step | None  # None: the stream's own process did not return
    exit_code: int


@dataclass(frozen=True)
class Launch:
    """Where the study's training steps train: `--launcher NAME` and `-o launcher.*`."""

    name: str | None = None  # None: as each spec's launcher section says
    overrides: tuple[str, ...] = ()

    def arguments(self) -> list[str]:
        """What a training step's command gets besides its own words."""
        added = [] if self.name is None else ["--launcher", self.name]
        return added + [f"--override={o}" for o in self.overrides]


def _words(step: Step) -> list[str]:
    """The step as `minimind`'s arguments, as a person would type them."""
    overrides = step.spec_overrides() if isinstance(step, RunStep) else step.overrides
    words = [step.kind, step.spec, *(w for o in overrides for w in ("-o", o))]
    if isinstance(step, RunStep):
        return words + [w for v in step.variants for w in ("--variant", v)]
    return words + (["--best"] if step.best else [])


def command_line(step: Step) -> str:
    """`minimind run a.yaml -o 'seeds=[0,1]' --variant x`: the step as a shell command."""
    return shlex.join(["minimind", *_words(step)])


def step_argv(step: Step, launch: Launch = Launch()) -> list[str]:
    """The process that runs `step`: `[python, -m, minimind, run, a.yaml, ..., --resume]`, this
    interpreter, so that a study runs with the installation that started it; a training step
    (not a sweep's `best`) gets the launch's arguments; a run resumes its spec's newest
    invocation, so that a study run again skips the runs it finished and, under Slurm, collects
    its jobs (a sweep tops its trials up by itself)."""
    trains = isinstance(step, RunStep) or not step.best
    resume = ["--resume", "--restart"] if isinstance(step, RunStep) else []
    launched = launch.arguments() if trains else []
    return [sys.executable, "-m", "minimind", *_words(step), *launched, *resume]


def describe_streams(study: Study, launch: Launch = Launch()) -> str:
    """`study train --dry-run`: each stream's steps as they would be launched (the argv `train`
    runs, its interpreter shown as `python`), one a line under its stream."""
    lines = []
    for k, steps in enumerate(study.streams, 1):
        lines.append(f"stream {k}: {len(steps)} step(s)")
        lines += [f"  {shlex.join(['python', *step_argv(s, launch)[1:]])}" for s in steps]
    return "\n".join(lines)


def _launch(argv: list[str], out: TextIO) -> int:
    """Run one step's process to its end, its output to `out`; its exit code. A stop of this
    process is passed on to the step's, which is waited for: it ends its runs KILLED."""
    try:
        process = subprocess.Popen(argv, stdout=out, stderr=out)
    except OSError as e:  # the interpreter could not be started: the stream fails too
        out.write(f"{e}\n")
        return EXIT_FAILED
    try:
        return process.wait()
    except KeyboardInterrupt as exc:
        process.send_signal(getattr(exc, "signum", signal.SIGINT))
        process.wait()
        raise


def _run_stream(k: int, steps: Sequence[Step], log: Path, launch: Launch) -> Failure | None:
    """A job: stream `k`'s steps in order until one fails; that one's failure, None when all
    ran. SIGTERM and SIGHUP stop it as Ctrl-C does, passed on to the running step."""
    from minimind.tracking import install_termination_handlers

    install_termination_handlers()
    with log.open("a", encoding="utf-8") as out:
        for i, step in enumerate(steps, 1):
            shown = command_line(step)
            print(f"stream {k}: [{i}/{len(steps)}] {shown}", file=sys.stderr, flush=True)
            out.write(f"$ {shown}\n")
            out.flush()
            start = time.monotonic()
            code = _launch(step_argv(step, launch), out)
            took = time.monotonic() - start
            if code != 0:
                print(
                    f"stream {k}: [{i}/{len(steps)}] failed with exit code {code} after "
                    f"{took:.0f} s (log: {log})",
                    file=sys.stderr,
                    flush=True,
                )
                return Failure(k, step, code)
            print(f"stream {k}: [{i}/{len(steps)}] done in {took:.0f} s", file=sys.stderr)
    return None


def train(study: Study, log_dir: Path, launch: Launch = Launch()) -> list[Failure]:
    """Run every stream of the manifest to its end (or its first failure), its training steps
    with `launch` added; the failures, empty when all ran."""
    return run_streams(study.streams, study.threads_per_stream, log_dir, "stream", launch)


def run_streams(
    streams: Sequence[Sequence[Step]],
    threads: int,
    log_dir: Path,
    name: str,
    launch: Launch = Launch(),
) -> list[Failure]:
    """Run `streams` of steps side by side, each with `OMP_NUM_THREADS=threads` and its log
    `<log_dir>/<name><k>.log`, their training steps with `launch` added; the failures."""
    log_dir.mkdir(parents=True, exist_ok=True)
    numbered = [(k, steps) for k, steps in enumerate(streams, 1) if steps]
    jobs = [
        Job(f"{name}{k}", _run_stream, (k, steps, log_dir / f"{name}{k}.log", launch))
        for k, steps in numbered
    ]
    outcomes = run_in_slots(jobs, [Placement(None, threads)] * len(jobs))
    failures = []
    for (k, _), job in zip(numbered, jobs, strict=True):
        outcome = outcomes[job.name]
        if isinstance(outcome, Unfinished):  # the stream's own process: its step is unknown
            print(f"stream {k}: {outcome.reason}", file=sys.stderr, flush=True)
            failures.append(Failure(k, None, EXIT_FAILED))
        elif outcome is not None:
            failures.append(outcome)
    return failures
