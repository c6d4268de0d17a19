"""`RunHandle`: the write side of one MLflow run, cheap to call from a training loop."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from mlflow.tracking import MlflowClient

from minimind.record import FAILURE_REASON_TAG
from minimind.tracking.fallback import FallbackFile
from minimind.tracking.lifecycle import Status, describe_exit
from minimind.tracking.ops import chunked, param_value, tag_value
from minimind.tracking.retry import RetryClock
from minimind.tracking.sender import Sender

DEFAULT_OUTAGE_S = 300.0
DEFAULT_FALLBACK_DIR = "results/tracking-fallback"


def outage_limit(outage_s: float | None) -> float:
    """`outage_s`, else `$MINIMIND_TRACKING_OUTAGE_S`, else 300 seconds."""
    if outage_s is not None:
        return float(outage_s)
    return float(os.environ.get("MINIMIND_TRACKING_OUTAGE_S", DEFAULT_OUTAGE_S))


class RunHandle:
    """Logs to one existing run through a background sender (see `minimind.tracking.sender`).

    Every logging method returns at once and never raises because of the tracking server: calls
    are queued, delivered in order and in batches, retried through an outage of up to `outage_s`
    seconds, and after that written to `<fallback_dir>/<run_id>.jsonl` for `minimind sync`.
    `flush()` waits for delivery; `end()` flushes and sets the final status. Used as a context
    manager the handle ends the run FINISHED, FAILED (an exception, with its text as
    `failure_reason`) or KILLED (KeyboardInterrupt or `Terminated`).

    With `create` (the fields of a `create` operation, see `minimind.tracking.ops`) the run does
    not exist on the server yet: `run_id` is a local id, and everything goes to the fallback file,
    which `minimind sync` turns into the run.

    Metric points whose step is in `skip_steps[key]` are dropped: a resumed run re-logs the
    steps after its checkpoint, and only those not already logged get through.
    """

    def __init__(
        self,
        client: MlflowClient,
        run_id: str,
        *,
        name: str = "",
        tracking_uri: str | None = None,
        outage_s: float | None = None,
        fallback_dir: str | Path = DEFAULT_FALLBACK_DIR,
        flush_interval_s: float = 2.0,
        skip_steps: dict[str, set[int]] | None = None,
        create: dict[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.name = name
        self.status: Status | None = None
        uri = tracking_uri or client.tracking_uri
        self._fallback = FallbackFile(fallback_dir, run_id, uri)
        retry = RetryClock(outage_limit(outage_s), label=f"tracking server {uri}")
        self._sender = Sender(
            client,
            run_id,
            retry,
            self._fallback,
            flush_interval_s,
            skip_steps=skip_steps,
            spilled=create is not None,
        )
        self._staging: Path | None = None
        self._artifact_count = 0
        self._ended = False
        if create is not None:  # the run exists only in the fallback file until it is synced
            self._put({"op": "create", **create})

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Queue metric values of one step; values are python numbers (or 0-dim CPU tensors)."""
        if self._ended:
            raise RuntimeError(f"run {self.run_id} has ended")
        values = {key: float(value) for key, value in metrics.items()}
        self._sender.put(("m", values, int(step), int(time.time() * 1000)))

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Queue params; values are stringified and cut to MLflow's length limit."""
        values = {key: param_value(value) for key, value in params.items()}
        for chunk in chunked(values):
            self._put({"op": "params", "params": chunk})

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        values = {key: tag_value(value) for key, value in tags.items()}
        for chunk in chunked(values):
            self._put({"op": "tags", "tags": chunk})

    def log_text(self, text: str, artifact_file: str) -> None:
        """Queue `text` as the artifact `artifact_file` (a relative path such as `samples/a.txt`)."""
        path = self._stage(artifact_file)
        path.write_text(text, encoding="utf-8")
        self._put_artifact(path, artifact_file)

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        """Queue `data` as YAML (`.yaml`/`.yml`) or JSON (anything else)."""
        path = self._stage(artifact_file)
        if path.suffix in (".yaml", ".yml"):
            text = yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True)
        else:
            text = json.dumps(data, indent=2, default=str)
        path.write_text(text, encoding="utf-8")
        self._put_artifact(path, artifact_file)

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        """Queue a matplotlib figure, rendered now (in the caller's thread) by its file suffix."""
        path = self._stage(artifact_file)
        figure.savefig(path)
        self._put_artifact(path, artifact_file)

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        """Queue a file or directory; it is copied now, so the caller may delete it afterwards."""
        source = Path(local_path)
        path = self._stage(source.name)
        if source.is_dir():
            shutil.copytree(source, path)
            artifact_path = f"{artifact_path}/{source.name}" if artifact_path else source.name
        else:
            shutil.copy2(source, path)
        self._put({"op": "artifact", "path": str(path), "artifact_path": artifact_path})

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything logged so far is on the server or in the fallback file.

        Call before writing a checkpoint: a SIGKILL after it then loses no step before it. Waits
        through an outage for up to the outage limit; False if `timeout` ran out first.
        """
        if self._ended:
            return True
        return self._sender.flush(timeout)

    def end(self, status: Status = "FINISHED", reason: str | None = None) -> None:
        """Flush, then set the final status (and tag `failure_reason` when given). Idempotent."""
        if self._ended:
            return
        if status not in ("FINISHED", "FAILED", "KILLED"):
            raise ValueError(f"status must be FINISHED, FAILED or KILLED, got {status!r}")
        if reason:
            self.set_tags({FAILURE_REASON_TAG: reason})
        self._ended = True
        self.status = status
        try:
            self._sender.close({"op": "end", "status": status, "end_time": int(time.time() * 1000)})
        finally:
            if self._staging is not None:
                shutil.rmtree(self._staging, ignore_errors=True)

    @property
    def spilled_to(self) -> Path | None:
        """The fallback file, once an outage outlasted the limit; else None."""
        return self._fallback.path if self._sender.spilled else None

    def __enter__(self) -> RunHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.end("FINISHED")
        else:
            self.end(*describe_exit(exc))

    def _put(self, op: dict[str, Any]) -> None:
        if self._ended:
            raise RuntimeError(f"run {self.run_id} has ended")
        self._sender.put(("op", op))

    def _stage(self, name: str) -> Path:
        """A fresh path named like `name` in this run's staging directory."""
        if self._staging is None:
            self._staging = Path(tempfile.mkdtemp(prefix=f"minimind-{self.run_id[:8]}-"))
        self._artifact_count += 1
        directory = self._staging / str(self._artifact_count)
        directory.mkdir()
        return directory / Path(name).name

    def _put_artifact(self, path: Path, artifact_file: str) -> None:
        parent = Path(artifact_file).parent.as_posix()
        self._put(
            {
                "op": "artifact",
                "path": str(path),
                "artifact_path": None if parent == "." else parent,
            }
        )
