"""Whether an earlier invocation's runs are still trained by Slurm jobs: a run whose job is alive
is not resumed from anywhere else (`minimind run --resume --launcher local` would close it and
train it beside its job, both writing one MLflow run and one checkpoint).

The jobs of a parent run are those its submitting command recorded in the ledger
(`<launcher.folder>/ledgers/<parent run id>.json`, queued ones included) and those its RUNNING
children name (`slurm.job_id`); `squeue` says which are alive.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from minimind.foundations.errors import MinimindError
from minimind.record import SLURM_JOB_TAG
from minimind.run.cluster.slurm import LIVE_STATES, Ledger, queue_states


class LiveJobsError(MinimindError):
    """A run that Slurm jobs still train; the message says which and what to do."""


def refuse_live_jobs(folder: str | Path, parent_run_id: str, running: Iterable[Any]) -> None:
    """`LiveJobsError` when a Slurm job of `parent_run_id` (in the ledger under `folder`, or named
    by one of its `running` child runs) is queued or running, or when there are such jobs and
    `squeue` cannot say whether they are."""
    jobs = dict(Ledger.open(folder, parent_run_id).jobs)
    for run in running:
        job = run.data.tags.get(SLURM_JOB_TAG)
        if job:
            jobs[run.info.run_name] = job
    if not jobs:
        return
    try:
        states = queue_states(jobs.values())
    except (OSError, subprocess.CalledProcessError) as err:
        raise LiveJobsError(
            f"parent run {parent_run_id} has Slurm jobs ({', '.join(sorted(set(jobs.values())))})"
            f" and squeue cannot say whether they still run ({err}); resume it where Slurm runs"
        ) from None
    live = {name: job for name, job in jobs.items() if states[job] in LIVE_STATES}
    if live:
        name, job = sorted(live.items())[0]
        more = f" and {len(live) - 1} more" if len(live) > 1 else ""
        raise LiveJobsError(
            f"parent run {parent_run_id}: {name} is trained by Slurm job {job}{more}, still "
            "queued or running; resume it with --launcher slurm (which waits for them), or "
            "scancel them first"
        )
