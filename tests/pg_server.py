"""A throwaway PostgreSQL server for tests: `initdb` + `pg_ctl` on a free loopback port.

    from pg_server import postgres_url  # noqa: F401  (the fixture, in a test module)

    def test_x(postgres_url): ...        # "postgresql[+psycopg2]://postgres@127.0.0.1:PORT/minimind"

The cluster lives in a fresh directory under the system temp dir (not pytest's tmp_path: that is
private to the user running pytest, and the server runs as `postgres` when that user is root,
since `initdb` refuses to run as root). Authentication is `trust`, on 127.0.0.1 only. The test
is skipped, with the reason, only when no PostgreSQL binaries exist (Debian: `apt-get install -y
postgresql`, which `.ci/run` does) or root has no `postgres` user to run them as.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

DATABASE = "minimind"
START_TIMEOUT_S = 60


def postgres_bin_dir() -> Path | None:
    """The directory of `initdb` and `pg_ctl`: on PATH, else Debian's newest
    /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found:  # resolved: /usr/local/bin may link initdb and pg_ctl but not createdb
        return Path(found).resolve().parent
    candidates = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    candidates.sort(key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(candidates[-1]).parent if candidates else None


def sqlalchemy_scheme() -> str:
    """`postgresql` (SQLAlchemy 2.1's default driver, psycopg 3) when psycopg is installed, else
    `postgresql+psycopg2`."""
    return "postgresql" if importlib.util.find_spec("psycopg") else "postgresql+psycopg2"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A running server with an empty database `minimind`; its SQLAlchemy URL."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="minimind-pg-"))
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root)
            pytest.skip("running as root and there is no `postgres` user to run initdb as")
        os.chown(root, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", free_port()

    def pg(tool: str, *args: str) -> None:
        done = subprocess.run(
            [*as_user, str(bin_dir / tool), *args],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed:\n{done.stdout}{done.stderr}")

    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    try:
        pg("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        pg("pg_ctl", "-D", str(data), "-l", str(root / "server.log"), "-o", options, "-w", "start")
    except RuntimeError:
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        pg("createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", DATABASE)
        yield f"{sqlalchemy_scheme()}://postgres@127.0.0.1:{port}/{DATABASE}"
    finally:
        pg("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
