"""`Tracker`: one experiment on one MLflow backend; creates, finds, resumes and cleans up runs.

Runs are addressed by explicit ids through `MlflowClient`, never through mlflow's global "active
run", so parent and child runs (and threads) cannot be confused. The role and parent
tags are those of `minimind.record`: a parent run per invocation tagged `minimind.role=parent`,
and child runs tagged `minimind.role=child` with `mlflow.parentRunId`.
"""

from __future__ import annotations

import functools
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Run
from mlflow.exceptions import MlflowException

from minimind.foundations.errors import MinimindError
from minimind.foundations.processes import is_alive
from minimind.record import (
    CHILD_ROLE,
    FAILURE_REASON_TAG,
    GIT_COMMIT_TAG,
    HOST_TAG,
    PARENT_ROLE,
    PARENT_TAG,
    PID_START_TAG,
    PID_TAG,
    ROLE_TAG,
    standard_tags,
)
from minimind.tracking.backend import StoreNotCreated, connect, default_artifact_location
from minimind.tracking.ops import logged_steps, tag_value
from minimind.tracking.retry import OutageExceeded, RetryClock, first_line, is_transient, notice
from minimind.tracking.run import DEFAULT_FALLBACK_DIR, RunHandle, outage_limit

STALE_REASON = "the process died without ending the run (SIGKILL, OOM kill or power loss)"


def git_commit(directory: str | Path | None = None) -> str | None:
    """The commit checked out in `directory` (default: the working directory), or None."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


class TrackingUnreachable(MinimindError):
    """The tracking server did not answer when the command started; the message is one line
    naming `tracking.uri`."""


class Tracker:
    """An MLflow experiment at `uri` (created if absent) and the runs in it.

    A server must answer when the tracker is made (`TrackingUnreachable` otherwise). Later
    synchronous calls (creating, finding, resuming runs) retry through a server outage of up to
    `outage_s` seconds (default `$MINIMIND_TRACKING_OUTAGE_S` or 300) and then raise; run handles
    use the same limit before they spill to `fallback_dir` (see `RunHandle`). New runs get the tag
    `git_commit` unless the caller gives one.
    """

    def __init__(
        self,
        uri: str,
        experiment: str,
        *,
        outage_s: float | None = None,
        fallback_dir: str | Path = DEFAULT_FALLBACK_DIR,
        flush_interval_s: float = 2.0,
    ) -> None:
        self.uri = uri
        self.experiment = experiment
        try:
            self.client = connect(uri)
        except StoreNotCreated as err:  # reported as a store that cannot be used: one line
            raise TrackingUnreachable(f"tracking.uri: {err}") from err
        self.outage_s = outage_limit(outage_s)
        self.fallback_dir = Path(fallback_dir)
        self.flush_interval_s = flush_interval_s
        self._retry = RetryClock(self.outage_s, label=f"tracking server {uri}")
        self.experiment_id: str = self._first_contact()
        self._git_commit = git_commit()

    def _first_contact(self) -> str:
        """The experiment's id. A server that does not answer now is a wrong or stopped
        `tracking.uri`, not an outage to wait out: nothing has trained yet, so the command
        stops at once (`TrackingUnreachable`) rather than retrying for the outage limit. A local
        database keeps the retries (a lock held by another process passes)."""
        if not self.uri.startswith(("http://", "https://")):
            return self._retry.call(self._ensure_experiment)
        try:
            return self._ensure_experiment()
        except Exception as exc:
            problem = "is unreachable" if is_transient(exc) else "answered with an error"
            # An HTML page of another server (a 404, a login form) is no traceback to show.
            raise TrackingUnreachable(
                f"tracking.uri: the tracking server {self.uri} {problem} "
                f"({first_line(exc)}); start it, or set tracking.uri to one that answers"
            ) from None

    def _ensure_experiment(self) -> str:
        found = self.client.get_experiment_by_name(self.experiment)
        if found is None:
            try:
                return self.client.create_experiment(
                    self.experiment, artifact_location=default_artifact_location(self.uri)
                )
            except MlflowException as exc:  # another process created it first
                if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                found = self.client.get_experiment_by_name(self.experiment)
                assert found is not None  # the one another process created
        if found.lifecycle_stage == "deleted":
            self.client.restore_experiment(found.experiment_id)
        return found.experiment_id

    def start_parent(self, name: str, tags: Mapping[str, Any] | None = None) -> RunHandle:
        """Create the parent run of one invocation."""
        return self._create(name, {ROLE_TAG: PARENT_ROLE, **(tags or {})})

    def start_child(
        self,
        parent: RunHandle | str,
        name: str,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> RunHandle:
        """Create a child run of `parent` (a handle or a run id) and queue its params."""
        parent_id = parent.run_id if isinstance(parent, RunHandle) else parent
        handle = self._create(name, {PARENT_TAG: parent_id, ROLE_TAG: CHILD_ROLE, **(tags or {})})
        if params:
            handle.log_params(params)
        return handle

    def _create(self, name: str, tags: dict[str, Any]) -> RunHandle:
        if self._git_commit is not None:
            tags.setdefault(GIT_COMMIT_TAG, self._git_commit)
        tags = {**standard_tags(self._git_commit), **tags}
        tags = {key: tag_value(value) for key, value in tags.items()}
        try:
            run = self._retry.call(
                lambda: self.client.create_run(self.experiment_id, run_name=name, tags=tags)
            )
        except OutageExceeded:
            return self._offline(name, tags)
        return self._handle(run.info.run_id, name)

    def _offline(self, name: str, tags: dict[str, str]) -> RunHandle:
        """A run the server, away past the outage limit, could not create: it trains and
        records into its fallback file under a local id, like the runs that spilled there, and
        `minimind sync` creates it on the server."""
        create = {
            "experiment_id": self.experiment_id,
            "run_name": name,
            "tags": tags,
            "start_time": int(time.time() * 1000),
        }
        handle = RunHandle(
            self.client,
            uuid.uuid4().hex,
            name=name,
            tracking_uri=self.uri,
            outage_s=self.outage_s,
            fallback_dir=self.fallback_dir,
            flush_interval_s=self.flush_interval_s,
            create=create,
        )
        path = handle.spilled_to
        notice(
            f"tracking server {self.uri} unreachable for more than {self.outage_s:g} s; run "
            f"{name} trains and records to {path}. Once the server is back, import it with: "
            f"minimind sync {path}"
        )
        return handle

    def resume_run(self, run_id: str) -> RunHandle:
        """Reopen a run (status back to RUNNING, `failure_reason` cleared) to continue logging.

        The run's metric history is read once; from then on the handle drops metric points whose
        (key, step) is already logged, so a deterministic run resumed from a checkpoint at step s
        re-logs steps s+1.. without duplicating those that got out before it stopped.
        """
        run = self._retry.call(lambda: self.client.get_run(run_id))
        skip = self._retry.call(lambda: logged_steps(self.client, run))
        self._retry.call(lambda: self.client.update_run(run_id, status="RUNNING"))
        if FAILURE_REASON_TAG in run.data.tags:
            self._retry.call(lambda: self.client.delete_tag(run_id, FAILURE_REASON_TAG))
        return self._handle(run_id, run.info.run_name, skip)

    def _handle(self, run_id: str, name: str, skip: dict[str, set[int]] | None = None) -> RunHandle:
        return RunHandle(
            self.client,
            run_id,
            name=name,
            tracking_uri=self.uri,
            outage_s=self.outage_s,
            fallback_dir=self.fallback_dir,
            flush_interval_s=self.flush_interval_s,
            skip_steps=skip,
        )

    def find_runs(
        self,
        tags: Mapping[str, str] | None = None,
        statuses: Iterable[str] | None = None,
        name: str | None = None,
    ) -> list[Run]:
        """Runs of this experiment with all of `tags`, newest first, optionally filtered by
        status (e.g. `("RUNNING", "FAILED", "KILLED")`) and run name."""
        clauses = [f"tags.`{key}` = {_quote(value)}" for key, value in (tags or {}).items()]
        if name is not None:
            clauses.append(f"attributes.run_name = {_quote(name)}")
        wanted = set(statuses) if statuses is not None else None
        runs: list[Run] = []
        token = None
        while True:
            page = self._retry.call(
                functools.partial(
                    self.client.search_runs,
                    [self.experiment_id],
                    filter_string=" and ".join(clauses),
                    order_by=["attributes.start_time DESC"],
                    page_token=token,
                )
            )
            runs += [run for run in page if wanted is None or run.info.status in wanted]
            token = page.token
            if not token:
                return runs

    def find_parent(
        self, tags: Mapping[str, str], statuses: Iterable[str] | None = None
    ) -> Run | None:
        """The newest parent run with all of `tags` (e.g. `{"plan_hash": h}`) and a status in
        `statuses` (any when None), or None."""
        runs = self.find_runs({ROLE_TAG: PARENT_ROLE, **tags}, statuses)
        return runs[0] if runs else None

    def children(self, parent_run_id: str, statuses: Iterable[str] | None = None) -> list[Run]:
        """The child runs of a parent, newest first."""
        return self.find_runs({PARENT_TAG: parent_run_id}, statuses)

    def fail_stale_runs(
        self, parent_run_id: str, status: str = "KILLED", reason: str = STALE_REASON
    ) -> list[str]:
        """End the RUNNING children of a parent whose process is gone, and the parent itself if
        RUNNING; returns the ids ended. Only for parents known to be dead (SIGKILL leaves runs
        RUNNING because no handler can run)."""
        stale = [run.info.run_id for run in self.children(parent_run_id, ["RUNNING"])]
        parent = self._retry.call(lambda: self.client.get_run(parent_run_id))
        if parent.info.status == "RUNNING":
            stale.append(parent_run_id)
        for run_id in stale:
            self.end_run(run_id, status, reason)
        return stale

    def end_run(self, run_id: str, status: str, reason: str) -> None:
        """End run `run_id` with `status`, tagged with the `failure_reason` `reason` (a run whose
        process is gone and cannot end it itself)."""
        self._retry.call(functools.partial(self.client.set_tag, run_id, FAILURE_REASON_TAG, reason))
        self._retry.call(functools.partial(self.client.set_terminated, run_id, status))

    def delete_run(self, run_id: str) -> None:
        """Delete run `run_id` (a parent under which nothing could be submitted)."""
        self._retry.call(functools.partial(self.client.delete_run, run_id))

    def close_dead_parents(self, tags: Mapping[str, str] | None = None) -> list[str]:
        """End KILLED every RUNNING parent (with `tags`, when given) whose process (tags
        `minimind.pid`, `minimind.pid_start` and `minimind.host`) is known dead, with its RUNNING
        children; returns the parents' ids.

        A SIGKILLed invocation leaves its runs RUNNING; the next invocation of any spec of the
        experiment closes them. A process whose pid now names another process (a later start
        time) is dead. A parent of another host, or without the tags, is left alone: its
        liveness cannot be checked from here.
        """
        closed = []
        for run in self.find_runs({ROLE_TAG: PARENT_ROLE, **(tags or {})}, ["RUNNING"]):
            pid, host = run.data.tags.get(PID_TAG), run.data.tags.get(HOST_TAG)
            started = run.data.tags.get(PID_START_TAG)
            if host == socket.gethostname() and pid is not None and not is_alive(int(pid), started):
                self.fail_stale_runs(run.info.run_id)
                closed.append(run.info.run_id)
        return closed


def _quote(value: str) -> str:
    # MLflow's search grammar has no escape inside string literals.
    value = str(value)
    if "'" in value:
        raise ValueError(f"cannot search for a value containing a single quote: {value!r}")
    return f"'{value}'"
