"""`minimind study --train`: the manifest's command streams, side by side.

Each stream runs its `minimind ...` commands in order, in child processes of this interpreter
with `OMP_NUM_THREADS` set to the study's `threads_per_stream`; a stream stops at its first
failing command and the others go on. Each command's output goes to the stream's log file, and
one line per command start and end to stderr, so that a long study shows its progress on a
terminal and in a log alike.

A `Launch` (`minimind study --launcher slurm -o launcher...`) adds its arguments to each
`minimind run` and `minimind sweep` command: every (arm, seed) is then a Slurm job. Every `run`
gets `--resume`, here or on Slurm, so that the study run again after a stop reopens each
command's invocation: it skips the runs that finished, continues the interrupted ones and, on
Slurm, waits for the jobs still queued or running and submits the runs that did not finish (a
sweep tops its studies up by itself).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from minimind.foundations.exit_codes import EXIT_FAILED
from minimind.study.manifest import Study


@dataclass(frozen=True)
class Failure:
    stream: int
    command: str
    exit_code: int


TRAINING_COMMANDS = ("run", "sweep")


@dataclass(frozen=True)
class Launch:
    """Where the study's training commands train: `--launcher NAME` and `-o launcher.*`."""

    name: str | None = None  # None: as each spec's launcher section says
    overrides: tuple[str, ...] = ()

    def arguments(self) -> list[str]:
        """What a training command (`run ...`, `sweep ...`) gets besides its own words."""
        added = [] if self.name is None else ["--launcher", self.name]
        return added + [f"--override={o}" for o in self.overrides]


def _argv(command: str, launch: Launch = Launch()) -> list[str]:
    """`minimind run x.yaml` -> `[python, -m, minimind, run, x.yaml, ..., --resume]`: this
    interpreter, so that a study runs with the installation that started it; a training command
    (not a sweep's `--best`) gets the launch's arguments; a `run` resumes its spec's newest
    invocation, so that a study run again skips the runs it finished and, under Slurm, collects
    its jobs (a sweep tops its trials up by itself)."""
    words = shlex.split(command)[1:]
    if words and words[0] in TRAINING_COMMANDS and "--best" not in words:
        words += launch.arguments()
    if words[:1] == ["run"] and "--resume" not in words:
        words.append("--resume")
    return [sys.executable, "-m", "minimind", *words]


def describe_streams(study: Study, launch: Launch = Launch()) -> str:
    """`--train --dry-run`: each stream's commands as they would be launched (the argv `train`
    runs, its interpreter shown as `python`), one a line under its stream."""
    lines = []
    for k, commands in enumerate(study.streams, 1):
        lines.append(f"stream {k}: {len(commands)} command(s)")
        lines += [f"  {shlex.join(['python', *_argv(c, launch)[1:]])}" for c in commands]
    return "\n".join(lines)


def _run_stream(
    k: int,
    commands: list[str],
    env: dict[str, str],
    log: Path,
    failures: list[Failure],
    launch: Launch,
) -> None:
    with log.open("a", encoding="utf-8") as out:
        for i, command in enumerate(commands, 1):
            print(f"stream {k}: [{i}/{len(commands)}] {command}", file=sys.stderr, flush=True)
            out.write(f"$ {command}\n")
            out.flush()
            start = time.monotonic()
            try:
                argv = _argv(command, launch)
                code = subprocess.run(argv, env=env, stdout=out, stderr=out).returncode
            except OSError as e:  # the interpreter could not be started: the stream fails too
                out.write(f"{e}\n")
                code = EXIT_FAILED
            took = time.monotonic() - start
            if code != 0:
                print(
                    f"stream {k}: [{i}/{len(commands)}] failed with exit code {code} after "
                    f"{took:.0f} s (log: {log})",
                    file=sys.stderr,
                    flush=True,
                )
                failures.append(Failure(k, command, code))
                return
            print(f"stream {k}: [{i}/{len(commands)}] done in {took:.0f} s", file=sys.stderr)


def train(study: Study, log_dir: Path, launch: Launch = Launch()) -> list[Failure]:
    """Run every stream of the manifest to its end (or its first failure), its training
    commands with `launch` added; the failures, empty when all ran."""
    return run_streams(study.streams, study.threads_per_stream, log_dir, "stream", launch)


def run_streams(
    streams: list[list[str]], threads: int, log_dir: Path, name: str, launch: Launch = Launch()
) -> list[Failure]:
    """Run `streams` of commands side by side, each with `OMP_NUM_THREADS=threads` and its log
    `<log_dir>/<name><k>.log`, their training commands with `launch` added; the failures."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    failures: list[Failure] = []
    workers = [
        threading.Thread(
            target=_run_stream,
            args=(k, commands, env, log_dir / f"{name}{k}.log", failures, launch),
            name=f"study-{name}-{k}",
        )
        for k, commands in enumerate(streams, 1)
        if commands
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return failures
