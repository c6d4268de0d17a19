"""Where studies live: `sweep.storage` to an Optuna storage.

- `sqlite:///results/optuna.db` (the default) and any other SQLAlchemy URL (`postgresql://...`,
  `mysql+pymysql://...`) give an `RDBStorage` with heartbeats, so that the trial of a worker that
  died is failed after `sweep.grace_period` seconds and queued again (see `liveness`).
- `journal:PATH` gives a `JournalStorage` over a `JournalFileBackend`: an append-only file with
  file locks, for processes on one host.

Parallel workers on SQLite: every connection waits up to `SQLITE_BUSY_TIMEOUT_S` for the database
lock instead of SQLite's 5 seconds before "database is locked". Optuna's writes are short
transactions (the Python driver opens a transaction only at the first write, so a reader never
has to upgrade a lock), so a writer waits behind at most a few others' milliseconds; the long
timeout only matters on a slow or overloaded disk.
"""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import optuna
import optuna.storages.journal

from minimind.foundations.file_lock import creation_lock
from minimind.spec import SpecError, SweepConfig
from minimind.sweep.liveness import OrphanCallback

SQLITE_BUSY_TIMEOUT_S = 60
JOURNAL_PREFIX = "journal:"


def check_storage_url(url: str) -> None:
    """Reject what cannot hold a shared, resumable study, before anything runs (`SpecError` on
    `sweep.storage`): an unknown database, a missing driver, an in-memory database."""
    if url.startswith(JOURNAL_PREFIX):
        path = Path(url.removeprefix(JOURNAL_PREFIX)).expanduser()
        if path.is_dir():
            raise SpecError(
                "sweep.storage", f"journal:PATH must name a file, {path} is a directory"
            )
        return
    import sqlalchemy
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = sqlalchemy.engine.make_url(url)
        parsed.get_dialect()
    except (ArgumentError, NoSuchModuleError) as err:
        raise SpecError("sweep.storage", f"not a database URL SQLAlchemy knows: {err}") from None
    except ImportError as err:
        raise SpecError(
            "sweep.storage", f"the driver for {url!r} is not installed: {err}"
        ) from None
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise SpecError(
            "sweep.storage",
            "an in-memory SQLite database vanishes with the process and cannot be shared by "
            "workers or resumed; give a file: sqlite:///results/optuna.db",
        )


def open_storage(sweep: SweepConfig, create: bool = True) -> optuna.storages.BaseStorage:
    """Connect to `sweep.storage` (creating a SQLite or journal file and its directory, unless
    `create` is False: then a missing file is a `SpecError`, and nothing is written); a
    `SpecError` on `sweep.storage` when that fails."""
    url = sweep.storage
    check_storage_url(url)
    local = _local_file(url)
    if not create and local is not None and not local.is_file():
        raise SpecError(
            "sweep.storage",
            f"{local} does not exist: no sweep has run yet (run it without --best first)",
        )
    try:
        if url.startswith(JOURNAL_PREFIX):
            path = Path(url.removeprefix(JOURNAL_PREFIX)).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
            backend = optuna.storages.journal.JournalFileBackend(str(path))
            return optuna.storages.journal.JournalStorage(backend)
        engine_kwargs = {}
        lock: AbstractContextManager = nullcontext()
        if url.startswith("sqlite") and local is not None:
            # Opening the storage creates its tables: once, whichever worker comes first.
            lock = creation_lock(local) if create else nullcontext()
            engine_kwargs = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
        with lock, warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=sweep.heartbeat_interval,
                grace_period=sweep.grace_period,
                heartbeat_stale_trial_callback=OrphanCallback(sweep.retries),
            )
    except SpecError:
        raise
    except Exception as err:  # a driver's connection errors have no common base class
        raise SpecError(
            "sweep.storage", f"cannot open {url}: {type(err).__name__}: {err}"
        ) from None


def _local_file(url: str) -> Path | None:
    """The file a SQLite or journal storage lives in; None for a database server."""
    if url.startswith(JOURNAL_PREFIX):
        return Path(url.removeprefix(JOURNAL_PREFIX)).expanduser()
    if url.startswith("sqlite"):
        import sqlalchemy

        database = sqlalchemy.engine.make_url(url).database
        return Path(database).expanduser() if database else None
    return None
