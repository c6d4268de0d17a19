"""Opening an MLflow tracking backend from a URI (a sqlite file, a server, or any store MLflow knows)."""

from __future__ import annotations

import os
from pathlib import Path

from mlflow.tracking import MlflowClient

from minimind.file_lock import creation_lock

# The harness does its own retrying (RetryClock), bounded by the outage limit and followed by the
# fallback file. MLflow's default HTTP policy (7 retries with exponential backoff, 120 s timeout)
# would block a single call for minutes and hide the outage from that clock. A user's explicit
# environment still wins.
_HTTP_ENV_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def sqlite_db_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///relative.db` or `sqlite:////absolute.db` URI, else None."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def connect(uri: str) -> MlflowClient:
    """A client for `uri`; creates the directory of a sqlite database file.

    Making the client opens the store, and opening a sqlite store creates or migrates its schema:
    that happens under `creation_lock` of the database, so that processes started together do
    not run the migrations twice (which leaves a half-migrated database).
    """
    db = sqlite_db_path(uri)
    if uri.startswith(("http://", "https://")):
        for name, value in _HTTP_ENV_DEFAULTS.items():
            os.environ.setdefault(name, value)
    if db is None:
        return MlflowClient(tracking_uri=uri)
    with creation_lock(db):
        return MlflowClient(tracking_uri=uri)


def default_artifact_location(uri: str) -> str | None:
    """Where a new experiment keeps artifacts: next to a sqlite database (`<db dir>/artifacts`)
    rather than MLflow's `./mlruns` in whatever directory the process happens to run; None lets
    the backend decide (a server's configured artifact root)."""
    db = sqlite_db_path(uri)
    return str((db.parent / "artifacts").resolve()) if db is not None else None
