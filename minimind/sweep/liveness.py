"""Which worker runs a trial, and what becomes of the trials of workers that died.

A worker writes on each trial it runs the user attribute `minimind`: its host, process id, the
tracking URI and the MLflow runs it opened for the trial. A RUNNING trial is orphaned when its
worker is gone, which is noticed in two ways:

- on this host, at once: the process no longer exists (or is a zombie). This is the only way for
  a journal file, which has no heartbeats, and the quick way for a local database;
- anywhere: on a database storage, Optuna's heartbeat of the trial is older than
  `sweep.grace_period` (`optuna.storages.fail_stale_trials`, run before every trial).

Either way the trial becomes FAIL, its MLflow runs end FAILED with a `failure_reason`, and
Optuna's `RetryHeartbeatStaleTrialCallback` (the successor of `RetryFailedTrialCallback`) queues
its params again, up to `sweep.retries` times, as a WAITING trial that the next `ask` runs.
"""

from __future__ import annotations

import os
import socket
import sys
import warnings
from collections.abc import Collection
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from minimind.foundations.processes import is_alive
from minimind.foundations.redact import without_password
from minimind.record import FAILURE_REASON_TAG, TRIAL_STATE_TAG

WORKER_ATTR = "minimind"
# Which machine a worker is on. `MINIMIND_WORKER_HOST` stands in for separate machines on one
# host (a test of heartbeats, which only see other hosts' dead workers).
HOST = os.environ.get("MINIMIND_WORKER_HOST") or socket.gethostname()


def record_worker(trial: optuna.Trial, tracking_uri: str, run_ids: list[str]) -> None:
    """Mark `trial` as run by this process, with the MLflow runs opened for it so far.

    The trial number is part of the record: a retried trial inherits its predecessor's user
    attributes, and a record of another trial number is not this trial's.
    """
    info = {
        "trial": trial.number,
        "host": HOST,
        "pid": os.getpid(),
        "tracking_uri": without_password(tracking_uri),  # stored in the study: no password
        "runs": list(run_ids),
    }
    trial.set_user_attr(WORKER_ATTR, info)


def worker_record(trial: FrozenTrial) -> dict[str, Any] | None:
    """What `record_worker` wrote for this very trial, or None."""
    info = trial.user_attrs.get(WORKER_ATTR)
    if isinstance(info, dict) and info.get("trial") == trial.number:
        return info
    return None


def orphaned(trial: FrozenTrial, exited: Collection[int] = ()) -> bool:
    """A RUNNING trial whose worker ran on this host and has exited (or is in `exited`: a
    process that is alive but has given the trial up, such as this one after Ctrl-C)."""
    info = worker_record(trial)
    if trial.state != TrialState.RUNNING or info is None or info["host"] != HOST:
        return False
    pid = int(info["pid"])
    return pid in exited or not is_alive(pid)


class OrphanCallback:
    """Called with each trial failed because its worker died (by `release_orphans`, or by Optuna
    as the RDB storage's `heartbeat_stale_trial_callback`): ends the trial's MLflow runs FAILED
    and queues the trial's params again, at most `retries` times."""

    def __init__(self, retries: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._retry = (
                optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=retries)
                if retries > 0
                else None
            )

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        info = worker_record(trial)
        where = f"{info['host']}:{info['pid']}" if info else "of the trial"
        reason = f"the worker {where} died (SIGKILL, OOM kill, lost machine) during the trial"
        print(f"trial {trial.number}: FAIL, {reason}", file=sys.stderr, flush=True)
        if info is not None:
            end_runs(info["tracking_uri"], info["runs"], reason)
        if self._retry is not None:
            self._retry(study, trial)


def end_runs(tracking_uri: str, run_ids: list[str], reason: str) -> None:
    """End those of `run_ids` still RUNNING as FAILED, tagged `state=failed` and `failure_reason`.

    Best effort: the tracking server being away must not stop the sweep; the runs stay RUNNING
    and the next invocation's clean-up tries again.
    """
    from mlflow.exceptions import MlflowException

    from minimind.tracking.backend import connect

    client = connect(tracking_uri)
    for run_id in run_ids:
        try:
            if client.get_run(run_id).info.status != "RUNNING":
                continue
            client.set_tag(run_id, TRIAL_STATE_TAG, "failed")
            client.set_tag(run_id, FAILURE_REASON_TAG, reason)
            client.set_terminated(run_id, "FAILED")
        except MlflowException as err:
            print(f"warning: could not end MLflow run {run_id}: {err}", file=sys.stderr)


def release_orphans(study: optuna.Study, retries: int, exited: Collection[int] = ()) -> list[int]:
    """Fail the RUNNING trials of dead workers (see the module docstring) and of the processes in
    `exited`; their numbers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # heartbeats; a no-op without them
    callback = OrphanCallback(retries)
    released = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not orphaned(trial, exited):
            continue
        # Through the storage, as Optuna's fail_stale_trials does: `study.tell` would also run
        # the sampler's after_trial hook, which expects to be inside `optimize`.
        storage = study._storage
        try:
            if not storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:  # another worker was first
            continue
        callback(study, storage.get_trial(trial._trial_id))
        released.append(trial.number)
    return released
