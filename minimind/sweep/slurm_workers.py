"""`minimind sweep --launcher slurm`: a study's workers as Slurm jobs against its shared storage.

Each job runs one worker (`worker.worker_main`) in submitit's process: it opens the study in
the spec's storage (PostgreSQL, which every node reaches) and the tracking store, and runs
trials until the study has its target, as a local worker does. The sweep that submitted them
waits for them, then reports as it does after local workers. Slurm's warning before the time
limit requeues a worker (`checkpoint`): its running trial fails in Optuna and, like a dead
worker's, is released and retried; the requeued worker goes on with the study.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

from minimind.run.cluster import slurm
from minimind.spec.launcher import LauncherConfig
from minimind.sweep.plan import worker_names
from minimind.sweep.worker import WorkerJob, worker_main


class SlurmWorker:
    """One sweep worker, as a job."""

    def __init__(self, job: WorkerJob) -> None:
        self.job = job

    def __call__(self) -> None:
        code = worker_main(self.job)
        if code:
            sys.exit(code)  # stopped: the job ends with the shell's code for its signal

    def checkpoint(self) -> Any:
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(SlurmWorker(self.job))


def run_worker_jobs(job: WorkerJob, n: int, launcher: LauncherConfig) -> list[str]:
    """Run `n` workers of `job` as Slurm jobs and wait for them; the lines describing those
    that did not complete (job id, state, log)."""
    work = [
        (name, SlurmWorker(replace(job, index=i, threads=launcher.cpus_per_task)))
        for i, name in enumerate(worker_names(n))
    ]
    submitted = slurm.submit(launcher, f"{job.study}-workers", work)
    for name, job_id in submitted.items():
        print(f"study {job.study}: {name} submitted as job {job_id}", flush=True)
    states = slurm.wait(submitted.values())
    return [
        f"{name}: job {job_id} ended {states[job_id]}; log: {slurm.log_path(launcher, job_id)}"
        for name, job_id in submitted.items()
        if states[job_id] != "COMPLETED"
    ]
