"""`run_in_slots`, the one way work runs N at a time here (`run --jobs`, a sweep's workers, a
study's streams): each slot's place, a dead job costing itself alone, and a stop passed on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from minimind.foundations import job_slots
from minimind.foundations.job_slots import (
    Job,
    Placement,
    Unfinished,
    current_placement,
    run_in_slots,
)

TIMEOUT_S = 120


def where_am_i(_tag: str) -> tuple[int, str | None, str | None, int]:
    """A job: its process, the environment its place set, and the place it was told."""
    return (
        os.getpid(),
        os.environ.get("OMP_NUM_THREADS"),
        os.environ.get("CUDA_VISIBLE_DEVICES"),
        current_placement().threads,
    )


def die(child_pid_file: str | None = None) -> int:
    """A job killed while it works, after starting a child process of its own (`sleep`)."""
    if child_pid_file is not None:
        child = subprocess.Popen(["sleep", "600"])
        Path(child_pid_file).write_text(str(child.pid))
    os.kill(os.getpid(), signal.SIGKILL)
    return 0  # never reached


def fail(message: str) -> int:
    raise ValueError(message)


def wait_for(path: str) -> int:
    """A job that outlives a sibling's death: it ends once `path` exists."""
    deadline = time.monotonic() + TIMEOUT_S
    while not Path(path).exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return 7


def test_jobs_run_in_their_slot_s_place_and_a_slot_runs_its_next_job_in_one_process() -> None:
    places = [Placement("3", 2), Placement("5", 1)]
    jobs = [Job(f"job{k}", where_am_i, (f"job{k}",)) for k in range(4)]
    outcomes = run_in_slots(jobs, places)
    assert list(outcomes) == ["job0", "job1", "job2", "job3"]  # each job's own result
    seen = {(env_threads, gpu, threads) for _pid, env_threads, gpu, threads in outcomes.values()}
    assert seen == {("2", "3", 2), ("1", "5", 1)}  # every job saw one of the two places
    pids = {pid for pid, *_ in outcomes.values()}  # type: ignore[misc]
    assert len(pids) == 2 and os.getpid() not in pids  # two processes, reused, not this one


def test_a_dead_job_costs_itself_alone_and_may_be_replaced(tmp_path: Path) -> None:
    flag = tmp_path / "dead"
    told: list[tuple[str, int | None]] = []

    def replace_dead(job: Job[int], pid: int | None) -> Job[int] | None:
        told.append((job.name, pid))
        flag.touch()  # the survivor may end now: it outlived the death
        return Job("replacement", int, ("11",)) if job.name == "dies" else None

    child_pid_file = tmp_path / "child"
    jobs = [Job("survives", wait_for, (str(flag),)), Job("dies", die, (str(child_pid_file),))]
    outcomes = run_in_slots(jobs, [Placement(None, 1)] * 2, replace_dead)
    dead = outcomes.pop("dies")
    assert outcomes == {"survives": 7, "replacement": 11}
    assert isinstance(dead, Unfinished) and dead.died and "died" in dead.reason
    assert [name for name, _ in told] == ["dies"]
    assert told[0][1] is not None and told[0][1] != os.getpid()
    child = int(child_pid_file.read_text())  # killed with its slot's process group
    deadline = time.monotonic() + TIMEOUT_S
    while Path(f"/proc/{child}").exists() and _state(child) != "Z":
        assert time.monotonic() < deadline, "the dead job's child outlived it"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rindex(")") + 2]


def test_a_job_that_raises_costs_itself_alone_and_the_next_jobs_run() -> None:
    jobs = [Job("raises", fail, ("no data",)), Job("next", int, ("3",)), Job("last", int, ("4",))]
    outcomes = run_in_slots(jobs, [Placement(None, 1)])
    assert outcomes["raises"] == Unfinished("raised ValueError: no data")
    assert (outcomes["next"], outcomes["last"]) == (3, 4)


def test_a_stop_that_arrives_before_the_job_starts_stops_it_as_it_starts(monkeypatch) -> None:
    called: list[bool] = []
    monkeypatch.setattr(job_slots, "_stop_requested", True)
    with pytest.raises(KeyboardInterrupt):
        job_slots._run_job(lambda: called.append(True), ())
    assert called == []


STOPPED = """
    import os, signal, sys, time
    from pathlib import Path
    from minimind.foundations import job_slots
    from minimind.foundations.job_slots import Job, Placement, run_in_slots

    def train(folder: str, name: str, stubborn: bool) -> int:
        if stubborn:  # a job whose stop hangs: SIGINT and SIGTERM ignored
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        Path(folder, name + ".started").touch()
        try:
            time.sleep(600)
        except KeyboardInterrupt:
            Path(folder, name + ".stopped").touch()
            return 130
        return 0

    if __name__ == "__main__":
        job_slots.STOP_GRACE_S = 1.0
        folder, stubborn = sys.argv[1], sys.argv[2] == "stubborn"
        jobs = [Job("a", train, (folder, "a", False)), Job("b", train, (folder, "b", stubborn))]
        try:
            run_in_slots(jobs, [Placement(None, 1)] * 2)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(130)
"""


def start_stoppable(tmp_path: Path, stubborn: bool) -> subprocess.Popen[str]:
    script = tmp_path / "stoppable.py"
    script.write_text(textwrap.dedent(STOPPED))
    mode = "stubborn" if stubborn else "obedient"
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not all((tmp_path / f"{name}.started").exists() for name in "ab"):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    return process


def test_a_stop_of_the_dispatcher_alone_reaches_every_job(tmp_path: Path) -> None:
    """`kill -INT <pid>` of the dispatcher only (the slots have their own process groups, so a
    terminal's Ctrl-C reaches it alone too): each job gets it and ends its work."""
    process = start_stoppable(tmp_path, stubborn=False)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 130 and out.strip() == "interrupted", out
    assert (tmp_path / "a.stopped").exists() and (tmp_path / "b.stopped").exists()


def test_a_job_that_ignores_the_stop_and_sigterm_is_killed(tmp_path: Path) -> None:
    process = start_stoppable(tmp_path, stubborn=True)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 130 and out.strip().endswith("interrupted"), out
    assert "did not end in time" in out
    assert (tmp_path / "a.stopped").exists() and not (tmp_path / "b.stopped").exists()
