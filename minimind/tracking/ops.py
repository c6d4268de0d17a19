"""The operations a run handle delivers to MLflow, one plain dict each.

The same dicts are the lines of the fallback file, so delivering live and replaying later share
this one `apply_op`:

    {"op": "metrics", "points": [[key, value, timestamp_ms, step], ...]}   # <= 1000 points
    {"op": "params", "params": {key: str}}                                 # <= 100 params
    {"op": "tags", "tags": {key: str}}                                     # <= 100 tags
    {"op": "artifact", "path": local file or directory, "artifact_path": str | None}
    {"op": "end", "status": "FINISHED" | "FAILED" | "KILLED", "end_time": ms}

A fallback file of a run that could not be created on the server starts with one more, which
`minimind sync` turns into the run (`fallback.replay`), never sent live:

    {"op": "create", "experiment_id": str, "run_name": str, "tags": {key: str}, "start_time": ms}

Every operation is idempotent: MLflow stores a metric point (key, timestamp, step, value) once
however often it is sent, an unchanged param or tag is a no-op, and an artifact overwrites itself.
That is what makes retrying after a lost response safe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import (
    MAX_PARAM_VAL_LENGTH,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_VAL_LENGTH,
)

Op = dict[str, Any]


def apply_op(client: MlflowClient, run_id: str, op: Op) -> None:
    """Deliver one operation; raises what MLflow raises."""
    kind = op["op"]
    if kind == "metrics":
        metrics = [Metric(k, v, ts, step) for k, v, ts, step in op["points"]]
        client.log_batch(run_id, metrics=metrics, synchronous=True)
    elif kind == "params":
        params = [Param(k, v) for k, v in op["params"].items()]
        client.log_batch(run_id, params=params, synchronous=True)
    elif kind == "tags":
        client.log_batch(
            run_id, tags=[RunTag(k, v) for k, v in op["tags"].items()], synchronous=True
        )
    elif kind == "artifact":
        path = Path(op["path"])
        if path.is_dir():
            client.log_artifacts(run_id, str(path), op["artifact_path"])
        else:
            client.log_artifact(run_id, str(path), op["artifact_path"])
    elif kind == "end":
        client.set_terminated(run_id, op["status"], op["end_time"])
    else:
        raise ValueError(f"unknown tracking operation {kind!r}")


def chunked(mapping: dict[str, str], size: int = MAX_PARAMS_TAGS_PER_BATCH) -> list[dict[str, str]]:
    """Split params or tags into pieces MLflow accepts in one `log_batch`."""
    items = list(mapping.items())
    return [dict(items[i : i + size]) for i in range(0, len(items), size)]


def param_value(value: object) -> str:
    """A param as MLflow stores it: a string within the backend's length limit."""
    return str(value)[:MAX_PARAM_VAL_LENGTH]


def tag_value(value: object) -> str:
    return str(value)[:MAX_TAG_VAL_LENGTH]


def logged_steps(client: MlflowClient, run: Run) -> dict[str, set[int]]:
    """For every metric key of `run` (as fetched by the caller), the steps already logged (one
    history read per key)."""
    run_id = run.info.run_id
    return {
        key: {m.step for m in client.get_metric_history(run_id, key)} for key in run.data.metrics
    }
