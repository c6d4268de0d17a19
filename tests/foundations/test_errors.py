"""One error base: every error of the package derives from `MinimindError`, and a command answers
any of them with one line and the error's exit code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import minimind
from minimind.cli import main
from minimind.compare import CompareError
from minimind.data import DataError
from minimind.foundations.errors import MinimindError
from minimind.foundations.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED


def _package_exceptions() -> list[type[Exception]]:
    """Every exception class defined in a module of the package (found by importing them all)."""
    found = []
    for module in pkgutil.walk_packages(minimind.__path__, "minimind."):
        if module.name.endswith("__main__"):  # runs the command line when imported
            continue
        loaded = importlib.import_module(module.name)
        for obj in vars(loaded).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, Exception)
                and obj.__module__ == loaded.__name__
            ):
                found.append(obj)
    return found


def test_every_error_of_the_package_derives_from_the_one_base() -> None:
    errors = _package_exceptions()
    # The walk finds the errors of every layer (a sanity floor: spec, data, compare, tracking...).
    assert len(errors) >= 12
    outside = [f"{e.__module__}.{e.__name__}" for e in errors if not issubclass(e, MinimindError)]
    assert outside == []


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (DataError("no such corpus"), EXIT_BAD_INPUT),
        (CompareError("the runs failed", exit_code=EXIT_FAILED), EXIT_FAILED),
    ],
)
def test_a_command_answers_any_error_of_the_package_with_its_exit_code(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: MinimindError,
    code: int,
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\n")

    def fails(plan: object) -> None:
        raise error

    monkeypatch.setattr("minimind.run.plan.plan_run", lambda spec: None)
    monkeypatch.setattr("minimind.run.plan.prepare_all", fails)
    assert main(["data", "prepare", str(spec)]) == code
    assert capsys.readouterr().err == f"error: {error}\n"
