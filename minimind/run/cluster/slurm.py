"""Jobs on Slurm through submitit: submission as one job array, the queue, the ledger.

    ledger = Ledger.open(launcher.folder, parent_run_id)
    submitted = submit(launcher, [("base/seed0", MinimindJob([...])), ...])
    ledger.record(submitted)
    ended = wait(ledger.live())        # job id -> its final state

A job's state is read from `squeue` (which lists a job for `MinJobAge` after it ends, 300 s by
default), not from `sacct`, which needs Slurm's accounting database and answers nothing on a
cluster without one; a job gone from the queue has ended. The ledger (`<folder>/ledgers/<key>.json`)
keeps the job id of each name submitted, so that a later invocation waits for the jobs of an
earlier one that still run instead of submitting their work again.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minimind.foundations.atomic_file import atomic_write_text
from minimind.spec import SpecError
from minimind.spec.launcher import LauncherConfig

POLL_S = 5.0
QUEUE_PATIENCE_S = 600.0
"""How long `wait` bears `squeue` failing in a row (a busy or restarting slurmctld answers
'Socket timed out' for a while) before it gives up with the error."""
# Not over: waiting, running, or stopped to be requeued (squeue's long state names).
LIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "RESV_DEL_HOLD",
    }
)
GONE = "ENDED"  # the state of a job that has left the queue


def require_submitit() -> None:
    """A `launcher.name` error (exit 2) where submitit is not installed."""
    import importlib.util

    if importlib.util.find_spec("submitit") is None:
        raise SpecError("launcher.name", "slurm needs submitit: pip install 'minimind-lab[slurm]'")
    if shutil.which("sbatch") is None:
        raise SpecError("launcher.name", "slurm: no sbatch on PATH (not a Slurm login node?)")


def resources(launcher: LauncherConfig, processes: int = 1) -> str:
    """A job's resources, as the dry run and the submission lines show them."""
    parts = [
        f"partition {launcher.partition or '(default)'}",
        f"{launcher.cpus_per_task} CPU(s)",
        f"{launcher.gpus_per_node} GPU(s)",
        f"{launcher.mem_gb:g} GB" if launcher.mem_gb is not None else "default memory",
        f"{launcher.timeout_min} min",
    ]
    if processes > 1:
        parts.append(f"{processes} processes (torchrun)")
    parts += [
        f"--{key.replace('_', '-')}={value}"
        for key, value in launcher.additional_parameters.items()
    ]
    return ", ".join(parts)


def describe_jobs(launcher: LauncherConfig, names: Sequence[str], processes: int = 1) -> str:
    """A dry run's job list: a heading, then one line per job (its name and resources)."""
    lines = [
        f"{len(names)} Slurm job(s), one array of at most {launcher.array_parallelism} at once; "
        f"logs under {launcher.folder}"
    ]
    lines += [f"  job {name}: {resources(launcher, processes)}" for name in names]
    return "\n".join(lines)


def executor_parameters(launcher: LauncherConfig, job_name: str) -> dict[str, Any]:
    """`SlurmExecutor.update_parameters` arguments (submitit's sbatch names)."""
    parameters: dict[str, Any] = {
        "job_name": job_name,
        "time": launcher.timeout_min,
        "cpus_per_task": launcher.cpus_per_task,
        "array_parallelism": launcher.array_parallelism,
        "signal_delay_s": launcher.signal_delay_s,
        "additional_parameters": dict(launcher.additional_parameters),
    }
    if launcher.partition is not None:
        parameters["partition"] = launcher.partition
    if launcher.gpus_per_node:
        parameters["gpus_per_node"] = launcher.gpus_per_node
    if launcher.mem_gb is not None:
        mem = launcher.mem_gb
        parameters["mem"] = f"{int(mem)}GB" if mem == int(mem) else f"{int(mem * 1024)}MB"
    return parameters


def submit(
    launcher: LauncherConfig, job_name: str, work: Sequence[tuple[str, Callable[[], Any]]]
) -> dict[str, str]:
    """Submit each (name, callable) as one task of one job array; the job id of each name.
    `sbatch` refusing the array (a partition, account or resource it does not grant) is a
    `launcher` `SpecError` with its answer: nothing was submitted."""
    import submitit
    from submitit.core.utils import FailedJobError

    if not work:
        return {}
    executor = submitit.SlurmExecutor(
        folder=Path(launcher.folder) / "%j", max_num_timeout=launcher.max_requeues
    )
    executor.update_parameters(**executor_parameters(launcher, job_name))
    try:
        with executor.batch():
            jobs = [executor.submit(function) for _, function in work]
    except FailedJobError as err:
        raise SpecError(
            "launcher", f"sbatch refused the jobs: {_last_line(str(err), err)}"
        ) from None
    return {name: job.job_id for (name, _), job in zip(work, jobs, strict=True)}


def log_path(launcher: LauncherConfig, job_id: str) -> Path:
    """The job's error log (submitit's stdout is beside it, `.out` for `.err`)."""
    import submitit

    return submitit.SlurmJob(Path(launcher.folder) / "%j", job_id).paths.stderr


def queue_states(job_ids: Iterable[str]) -> dict[str, str]:
    """The state of each job id (`123` or an array task `123_4`) in the queue; GONE when absent."""
    wanted = set(job_ids)
    if not wanted:
        return {}
    listed = subprocess.run(
        ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    states = dict(line.split("|", 1) for line in listed.splitlines() if "|" in line)
    return {job_id: states.get(job_id, GONE) for job_id in wanted}


def wait(
    job_ids: Iterable[str],
    on_end: Callable[[str, str], None] = lambda job_id, state: None,
    poll_s: float = POLL_S,
    patience_s: float = QUEUE_PATIENCE_S,
) -> dict[str, str]:
    """Wait until every job has ended (calling `on_end(job_id, state)` as each does); the final
    state of each. A failing `squeue` is asked again at the next poll, for up to `patience_s`
    of failures in a row: one unanswered poll in hours of waiting does not end the wait."""
    waiting = set(job_ids)
    ended: dict[str, str] = {}
    failing_since: float | None = None
    while waiting:
        try:
            states = queue_states(waiting)
        except subprocess.CalledProcessError as err:
            now = time.monotonic()
            failing_since = now if failing_since is None else failing_since
            if now - failing_since >= patience_s:
                raise
            print(f"warning: squeue failed ({_last_line(err.stderr or '', err)}); asking again", file=sys.stderr, flush=True)  # fmt: skip
            time.sleep(poll_s)
            continue
        failing_since = None
        for job_id, state in states.items():
            if state not in LIVE_STATES:
                ended[job_id] = state
                waiting.discard(job_id)
                on_end(job_id, state)
        if waiting:
            time.sleep(poll_s)
    return ended


@dataclass
class Ledger:
    """The job id of each name submitted under one key (a parent run, a study), in a file."""

    path: Path
    jobs: dict[str, str]

    @classmethod
    def open(cls, folder: str | Path, key: str) -> Ledger:
        path = Path(folder) / "ledgers" / f"{key}.json"
        jobs = json.loads(path.read_text()) if path.exists() else {}
        return cls(path, jobs)

    def record(self, submitted: Mapping[str, str]) -> None:
        self.jobs.update(submitted)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(self.jobs, indent=1, sort_keys=True) + "\n")

    def live(self, names: Iterable[str]) -> dict[str, str]:
        """The names among `names` whose recorded job is still queued or running: job id."""
        recorded = {name: self.jobs[name] for name in names if name in self.jobs}
        states = queue_states(recorded.values())
        return {name: job for name, job in recorded.items() if states[job] in LIVE_STATES}


def partition_nodes(partition: str | None) -> list[str]:
    """The nodes of `partition` (the default partition when None), from `sinfo`; a
    `launcher.partition` error where Slurm does not answer."""
    command = ["sinfo", "-h", "-N", "-o", "%N"]
    if partition is not None:
        command += ["-p", partition]
    try:
        listed = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        problem = _last_line(getattr(err, "stderr", None) or "", err)
        raise SpecError("launcher.partition", f"sinfo failed: {problem}") from None
    return sorted(set(listed.split()))


def shared_store_problem(
    uri: str, launcher: LauncherConfig, nodes: Callable[[str | None], list[str]] | None = None
) -> str | None:
    """Why the jobs could not share the tracking store at `uri`, or None.

    A server or a database every node reaches is shared; a sqlite file or a local directory is
    shared only when every node of the partition is this host (a one-node cluster, whose jobs
    write the file the submitting command reads). On several nodes the file would need a shared
    filesystem, which SQLite's locking does not support (its documentation: NFS locks are
    unreliable), so it is refused."""
    local = uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri
    if not local:
        return None
    here = socket.gethostname().split(".")[0]
    found = (nodes or partition_nodes)(launcher.partition)
    if found and all(node.split(".")[0] == here for node in found):
        return None
    where = f"partition {launcher.partition}" if launcher.partition else "the default partition"
    return (
        f"{uri} is a file on this host, which the jobs on the nodes of {where} "
        f"({', '.join(found) or 'none listed'}) cannot share; use an MLflow server "
        "(http://...) or a database (postgresql://...)"
    )


def _last_line(answer: str, fallback: object) -> str:
    """The last line of a Slurm tool's answer (its reason), or `fallback` when it said nothing."""
    lines = answer.strip().splitlines()
    return lines[-1] if lines else str(fallback)
