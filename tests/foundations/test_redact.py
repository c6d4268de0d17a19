"""Credentials never reach the terminal: errors, tracking notices and tracebacks mask them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minimind.foundations.redact import redact


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
