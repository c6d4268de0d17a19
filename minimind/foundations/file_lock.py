"""An inter-process lock beside a shared file, for creating that file once.

    with creation_lock(db_path):
        ...  # create or migrate db_path; a second process waits here, then finds it made

Processes that share a results directory (two `minimind run`s started together, sweep workers)
would otherwise race on a fresh MLflow database, Optuna storage or token cache: both see it
missing and both create it, and a schema migration run twice leaves a half-migrated database.
The lock is `<path>.lock`, an OS-level lock (`filelock`), released when its holder dies.
"""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock


def creation_lock(path: str | Path) -> FileLock:
    """The lock `<path>.lock` (its directory created); a context manager that waits for it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{path}.lock")
