"""Credentials never reach the terminal: errors, tracking notices and tracebacks mask them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minimind.foundations.redact import redact, without_password, without_passwords


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "cannot open postgresql://u:hunter2@db:5432/x",
            "cannot open postgresql://u:***@db:5432/x",
        ),
        (
            "http://u:p@ss@h:1/api, mysql+pymysql://a:b@c/d",
            "http://u:***@h:1/api, mysql+pymysql://a:***@c/d",
        ),
        ("sqlite:///results/mlflow.db", "sqlite:///results/mlflow.db"),
        ("http://127.0.0.1:5000/api/2.0", "http://127.0.0.1:5000/api/2.0"),
        ("mail user@host about it", "mail user@host about it"),
    ],
)
def test_passwords_in_urls_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_an_uncaught_exception_of_a_command_prints_no_password() -> None:
    code = (
        "from minimind.cli import main\n"
        "main(['registry'])\n"  # any command: the CLI installs the hook before running it
        "raise ConnectionError('postgresql://u:hunter2@127.0.0.1:9/db refused')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "ConnectionError: postgresql://u:***@127.0.0.1:9/db refused" in result.stderr
    assert "hunter2" not in result.stderr


LIBRARY_LOGS = """
import logging, optuna
from minimind.cli import main
main(['registry'])  # any command: the CLI masks log records before running it
url = 'postgresql://user:secret@127.0.0.1:9/db'
logging.getLogger('sqlalchemy.pool').warning('cannot connect to %s', url)  # logging.lastResort
optuna.logging.get_logger('optuna.storages').warning(f'retrying {url}')  # Optuna's own handler
try:
    raise ConnectionError(url)
except ConnectionError:
    logging.getLogger('urllib3.connectionpool').exception('request failed')
"""


def test_library_log_lines_print_no_password() -> None:
    result = subprocess.run([sys.executable, "-c", LIBRARY_LOGS], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "cannot connect to postgresql://user:***@127.0.0.1:9/db" in result.stderr
    assert "retrying postgresql://user:***@127.0.0.1:9/db" in result.stderr
    assert "ConnectionError: postgresql://user:***@127.0.0.1:9/db" in result.stderr
    assert "secret" not in result.stderr


# --- the forms SQLAlchemy and MLflow accept, read by a URL parser ----------------------------

SECRET = "pa/ss:w?rd"  # "/", ":" and "?" unencoded: SQLAlchemy reads them as the password
DATABASE_FORMS = [
    "postgresql://lab:{pw}@db.example:5432/runs",
    "postgresql+psycopg://lab:{pw}@db.example/runs?sslmode=require",
    "mysql+pymysql://lab:{pw}@[::1]:3306/runs",
    "postgresql://lab@db.example/runs?password={pw}",
    "postgresql://lab@db.example/runs?sslmode=require&password={pw}&connect_timeout=3",
    "postgresql://lab@/runs?host=/var/run/postgresql&password={pw}",
]


@pytest.mark.parametrize("form", DATABASE_FORMS)
def test_database_urls_lose_the_password_sqlalchemy_reads(form: str) -> None:
    from sqlalchemy.engine import make_url

    # A password in the query is read unencoded only up to '&': encode that one.
    url = form.format(pw=SECRET.replace("&", "%26") if "?password" in form else SECRET)
    read = make_url(url)
    assert SECRET in (read.password, read.query.get("password"))
    assert "pa/ss" not in redact(f"cannot open {url}: refused")
    assert "***" in redact(url)
    stored = make_url(without_password(url))
    assert stored.password is None and "password" not in stored.query
    assert (stored.username, stored.host, stored.port, stored.database) == (
        read.username, read.host, read.port, read.database,
    )  # fmt: skip
    assert {k: v for k, v in read.query.items() if k != "password"} == dict(stored.query)


@pytest.mark.parametrize(
    "url",
    [
        "http://lab:pa%2Fss@mlflow.example:5000",
        "https://lab:pa%2Fss@mlflow.example/api/2.0/mlflow?x=1",
    ],
)
def test_server_urls_lose_the_password_requests_reads(url: str) -> None:
    from urllib.parse import urlsplit

    assert urlsplit(url).password == "pa%2Fss"
    assert "pa%2Fss" not in redact(url) and "lab:***@mlflow.example" in redact(url)
    stored = urlsplit(without_password(url))
    assert stored.password is None and stored.username == "lab"
    assert (stored.hostname, stored.port, stored.path) == (
        urlsplit(url).hostname, urlsplit(url).port, urlsplit(url).path,
    )  # fmt: skip


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:////tmp/mlflow.db?mode=ro",
        "http://mlflow.example:5000/runs/a@b",  # '@' in an http path: no user there
        "file:///data/user@host/mlruns",
        "journal:results/optuna.log",
    ],
)
def test_urls_without_passwords_are_kept_as_they_are(text: str) -> None:
    assert redact(text) == without_password(text) == text


def test_every_string_of_a_tree_loses_its_passwords() -> None:
    tree = {"tracking": {"uri": "postgresql://u:x/y@h/db"}, "list": ["mysql://a:b@c/d", 3]}
    assert without_passwords(tree) == {
        "tracking": {"uri": "postgresql://u@h/db"},
        "list": ["mysql://a@c/d", 3],
    }
