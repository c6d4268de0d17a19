"""Opening an MLflow tracking backend from a URI (a sqlite file, a server, or any store MLflow knows)."""

from __future__ import annotations

import os
import urllib.parse
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from minimind.foundations.errors import MinimindError
from minimind.foundations.file_lock import creation_lock
from minimind.foundations.writable import unwritable_dir

if TYPE_CHECKING:  # mlflow takes seconds to import: the dry run's store check does without it
    from mlflow.tracking import MlflowClient

# The harness does its own retrying (RetryClock), bounded by the outage limit and followed by the
# fallback file. MLflow's default HTTP policy (7 retries with exponential backoff, 120 s timeout)
# would block a single call for minutes and hide the outage from that clock. A user's explicit
# environment still wins.
_HTTP_ENV_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


_SQLITE_HEADER = b"SQLite format 3\x00"

# URI schemes MLflow's own store registry always handles (a path's is ""), so that a URI of one
# of them is accepted without importing MLflow; others are looked up in the registry itself.
_BUILT_IN_SCHEMES = frozenset(
    {"", "file", "http", "https", "sqlite", "postgresql", "mysql", "mssql"}
)


def sqlite_db_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///relative.db` or `sqlite:////absolute.db` URI, else None."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def store_problem(uri: str) -> str | None:
    """Why MLflow cannot open a tracking store at `uri`, found without connecting or writing: a
    scheme that no installed store handles, or a sqlite database that cannot be created or
    written. None does not mean that a server answers (`TrackingUnreachable` says that)."""
    if not _has_built_in_scheme(uri):
        problem = _registry_problem(uri)
        if problem is not None:
            return problem
    db = sqlite_db_path(uri)
    if db is None:
        return None
    if db.is_dir():
        return f"the database {db} is a directory"
    if db.exists() and not os.access(db, os.W_OK):
        return f"the database {db} is not writable"
    if db.is_file() and not is_sqlite_file(db):
        return f"{db} is not an SQLite database"
    problem = unwritable_dir(db.parent)
    return None if problem is None else f"the database {db}: {problem}"


def _has_built_in_scheme(uri: str) -> bool:
    """Whether `uri`'s scheme, read as MLflow reads it, is one of `_BUILT_IN_SCHEMES`; a
    database scheme with a driver (`postgresql+psycopg2`) is left to MLflow's own check."""
    scheme = urllib.parse.urlparse(uri).scheme
    return scheme in _BUILT_IN_SCHEMES or (
        len(scheme) == 1 and scheme.isalpha()
    )  # a Windows drive letter


def _registry_problem(uri: str) -> str | None:
    """Why MLflow's store registry has no store for `uri`: its own schemes, and any a plugin
    registered through the `mlflow.tracking_store` entry point (private, but the one list MLflow
    itself consults)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    try:
        _tracking_store_registry.get_store_builder(uri)
    except MlflowException:
        schemes = sorted(scheme for scheme in _tracking_store_registry._registry if scheme)
        return f"MLflow has no tracking store for {uri!r}; use a path or a {', '.join(schemes)} URI"
    return None


def is_sqlite_file(path: Path) -> bool:
    """Whether `path` is an SQLite database: its header, or empty (SQLite makes one of it)."""
    with path.open("rb") as f:
        header = f.read(len(_SQLITE_HEADER))
    return header in (b"", _SQLITE_HEADER)


def reachability_problem(uri: str) -> str | None:
    """Why the tracking server or database server at `uri` cannot be used now (it does not
    answer, or not as an MLflow server), found with one read and no retries; None for a local
    store, which has no server to be away, and for stores of other schemes. Run before any long
    work, so that a stopped server is reported at once rather than after the corpus is
    tokenized (MLflow itself retries a database for minutes)."""
    from minimind.tracking.retry import first_line

    try:
        if uri.startswith(("http://", "https://")):
            connect(uri).search_experiments(max_results=1)
        elif _is_database_server(uri):
            import sqlalchemy

            engine = sqlalchemy.create_engine(uri)
            try:
                engine.connect().close()
            finally:
                engine.dispose()
    except Exception as exc:  # a driver's or an HTTP library's errors have no common base
        return (
            f"{uri} does not answer as a tracking store ({first_line(exc)}); start it, or set "
            "tracking.uri to one that answers"
        )
    return None


def _is_database_server(uri: str) -> bool:
    scheme = uri.partition("://")[0].partition("+")[0]
    return scheme in ("postgresql", "mysql", "mssql")


def connect(uri: str) -> MlflowClient:
    """A client for `uri`; creates the directory of a sqlite database file.

    Making the client opens the store, and opening a sqlite store creates or migrates its schema:
    that happens under `creation_lock` of the database, so that processes started together do
    not run the migrations twice (which leaves a half-migrated database).
    """
    from mlflow.tracking import MlflowClient

    db = sqlite_db_path(uri)
    if uri.startswith(("http://", "https://")):
        for name, value in _HTTP_ENV_DEFAULTS.items():
            os.environ.setdefault(name, value)
    if db is None:
        return MlflowClient(tracking_uri=uri)
    with creation_lock(db):
        if not db.exists():
            _create_sqlite_store(db)
        return MlflowClient(tracking_uri=uri)


class StoreNotCreated(MinimindError):
    """A new SQLite tracking store could not be built (a full disk); nothing was left behind.
    The message is one line."""


def _create_sqlite_store(db: Path) -> None:
    """Build MLflow's schema in a file beside `db` and rename it into place: a store that
    failed halfway (a full disk) is never left at `db`, where every later open would fail on
    its half-made tables."""
    from mlflow.tracking import MlflowClient

    from minimind.tracking.retry import first_line

    db.parent.mkdir(parents=True, exist_ok=True)
    # a name of its own each time: MLflow keeps an engine per URI, which a failed try leaves open
    partial = db.with_name(f".{db.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        store = MlflowClient(tracking_uri=f"sqlite:///{partial.resolve()}")._tracking_client.store
        store.engine.dispose()  # every connection closed before the file moves
        os.replace(partial, db)
    except Exception as exc:  # an OSError, or sqlite's "database or disk is full" in MLflow's
        partial.unlink(missing_ok=True)
        raise StoreNotCreated(
            f"the MLflow store {db} could not be created ({first_line(exc)}); nothing was left "
            "there: free space (or fix the error) and run again"
        ) from exc


class StoreMissing(MinimindError):
    """A SQLite tracking store to read from that does not exist: opening it would make one."""


def connect_existing(uri: str) -> MlflowClient:
    """A client for `uri` to read runs from, opened as they were written (`connect`); a SQLite
    store that does not exist is `StoreMissing` rather than an empty store made there."""
    db = sqlite_db_path(uri)
    if db is not None and not db.exists():
        raise StoreMissing(f"no MLflow store at {db} (tracking URI {uri})")
    return connect(uri)


def default_artifact_location(uri: str) -> str | None:
    """Where a new experiment keeps artifacts: next to a sqlite database (`<db dir>/artifacts`)
    rather than MLflow's `./mlruns` in whatever directory the process happens to run; None lets
    the backend decide (a server's configured artifact root)."""
    db = sqlite_db_path(uri)
    return str((db.parent / "artifacts").resolve()) if db is not None else None
