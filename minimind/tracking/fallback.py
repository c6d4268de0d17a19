"""The local fallback file of a run whose tracking server stayed away, and its replay.

A fallback file `<dir>/<run_id>.jsonl` holds one JSON object per line: a header
`{"format": "minimind-tracking-fallback", "version": 1, "run_id": ..., "tracking_uri": ...}`,
then the operations of `minimind.tracking.ops` in the order they were logged. Artifacts are moved
into `<dir>/<run_id>.artifacts/` and referenced relative to the file. `replay` (the `minimind
sync` command) sends them to the run, skipping what the run already has, so it is idempotent.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mlflow.tracking import MlflowClient

from minimind.foundations.errors import MinimindError
from minimind.record import OFFLINE_ID_TAG
from minimind.tracking.backend import connect
from minimind.tracking.ops import Op, apply_op, logged_steps

FORMAT = "minimind-tracking-fallback"
VERSION = 1


class FallbackFormatError(MinimindError, ValueError):
    """The file is not a fallback file this version can read."""


class FallbackFile:
    """Appends the operations of one run to its fallback file, opened on the first write."""

    def __init__(self, directory: str | Path, run_id: str, tracking_uri: str) -> None:
        self.path = Path(directory) / f"{run_id}.jsonl"
        self.run_id = run_id
        self.tracking_uri = tracking_uri
        self._file: IO[str] | None = None

    def append(self, op: Op) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
            if self._file.tell() == 0:
                header = {
                    "format": FORMAT,
                    "version": VERSION,
                    "run_id": self.run_id,
                    "tracking_uri": self.tracking_uri,
                }
                self._file.write(json.dumps(header) + "\n")
        if op["op"] == "artifact":
            source = Path(op["path"])
            # A fresh directory per artifact: two artifacts may share a file name.
            dest = self.path.with_suffix(".artifacts") / uuid.uuid4().hex[:12] / source.name
            dest.parent.mkdir(parents=True)
            shutil.move(source, dest)
            op = {**op, "path": dest.relative_to(self.path.parent).as_posix()}
        self._file.write(json.dumps(op) + "\n")

    def flush(self) -> None:
        """Hand buffered lines to the OS, so that they survive the death of this process."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None


def read_fallback(path: str | Path) -> tuple[dict, list[Op]]:
    """The header and the operations of a fallback file, artifact paths made absolute.

    A torn last line (the process died while writing it) is ignored; its operation was never
    acknowledged to anyone.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    records: list[dict] = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise FallbackFormatError(f"{path}:{number}: not a JSON line") from None
    if not records or records[0].get("format") != FORMAT:
        raise FallbackFormatError(f"{path}: not a minimind tracking fallback file")
    if records[0].get("version") != VERSION:
        raise FallbackFormatError(f"{path}: unsupported fallback version {records[0]['version']}")
    ops = records[1:]
    for op in ops:
        if op.get("op") == "artifact":
            op["path"] = str(path.parent / op["path"])
    return records[0], ops


@dataclass
class ReplayReport:
    run_id: str
    tracking_uri: str
    metrics_sent: int = 0
    metrics_skipped: int = 0
    params_sent: int = 0
    param_conflicts: list[str] = field(default_factory=list)
    tags_sent: int = 0
    artifacts_sent: int = 0
    ended: str | None = None
    created: bool = False

    def summary(self) -> str:
        text = (
            f"run {self.run_id}{' (created now)' if self.created else ''}: "
            f"{self.metrics_sent} metric points sent, "
            f"{self.metrics_skipped} already logged; {self.params_sent} params, "
            f"{self.tags_sent} tags, {self.artifacts_sent} artifacts"
        )
        if self.ended:
            text += f"; run ended {self.ended}"
        if self.param_conflicts:
            text += f"; params kept with their logged values: {', '.join(self.param_conflicts)}"
        return text


def replay(path: str | Path, tracking_uri: str | None = None) -> ReplayReport:
    """Send a fallback file to its run (on `tracking_uri`, default the one it was written for).

    Metric points whose (key, step) the run already has are skipped, params already logged are
    kept (a differing value is reported, not overwritten), and the final status is applied only
    to a run still marked RUNNING.
    """
    header, ops = read_fallback(path)
    run_id = header["run_id"]
    report = ReplayReport(run_id, tracking_uri or header["tracking_uri"])
    client = connect(report.tracking_uri)
    if ops and ops[0]["op"] == "create":  # a run the server never saw: create it first
        run_id = report.run_id = _create_once(client, run_id, ops.pop(0))
        report.created = True
    run = client.get_run(run_id)
    logged = logged_steps(client, run)
    params = dict(run.data.params)
    for op in ops:
        kind = op["op"]
        if kind == "metrics":
            fresh = []
            for point in op["points"]:
                key, _, _, step = point
                steps = logged.setdefault(key, set())
                if step not in steps:
                    steps.add(step)
                    fresh.append(point)
            report.metrics_skipped += len(op["points"]) - len(fresh)
            if fresh:
                apply_op(client, run_id, {"op": "metrics", "points": fresh})
                report.metrics_sent += len(fresh)
        elif kind == "params":
            fresh_params = {k: v for k, v in op["params"].items() if k not in params}
            report.param_conflicts += [
                k for k, v in op["params"].items() if k in params and params[k] != v
            ]
            if fresh_params:
                apply_op(client, run_id, {"op": "params", "params": fresh_params})
                params.update(fresh_params)
                report.params_sent += len(fresh_params)
        elif kind == "end":
            if client.get_run(run_id).info.status == "RUNNING":
                apply_op(client, run_id, op)
                report.ended = op["status"]
        else:
            apply_op(client, run_id, op)
            if kind == "tags":
                report.tags_sent += len(op["tags"])
            else:
                report.artifacts_sent += 1
    return report


def _create_once(client: MlflowClient, local_id: str, create: Op) -> str:
    """The id of the run `create` describes: found by its `minimind.offline_id` tag when an
    earlier sync created it, else created now (with its original start time)."""
    found = client.search_runs(
        [create["experiment_id"]], filter_string=f"tags.`{OFFLINE_ID_TAG}` = '{local_id}'"
    )
    if found:
        return found[0].info.run_id
    run = client.create_run(
        create["experiment_id"],
        start_time=create["start_time"],
        tags={**create["tags"], OFFLINE_ID_TAG: local_id},
        run_name=create["run_name"],
    )
    return run.info.run_id
