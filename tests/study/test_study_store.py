"""scripts/study_store.py: the study's stores saved compressed and restored, never overwritten."""

from __future__ import annotations

import runpy
import sqlite3
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "study_store.py"


def _main(monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv])
    runpy.run_path(str(SCRIPT), run_name="__main__")


def _rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute("select * from t order by k").fetchall()


def test_saved_stores_restore_to_the_same_rows(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("results").mkdir()
    for name, rows in (("mlflow", 300), ("optuna", 7)):
        with sqlite3.connect(f"results/{name}.db") as db:
            db.execute("create table t (k integer primary key, v text)")
            db.executemany("insert into t values (?, ?)", [(i, f"{name}{i}") for i in range(rows)])
    before = {p: _rows(Path(p)) for p in ("results/mlflow.db", "results/optuna.db")}
    _main(monkeypatch, "save")
    assert sorted(p.name for p in Path("results/study/store").iterdir()) == [
        "mlflow.db.xz",
        "optuna.db.xz",
    ]
    with pytest.raises(SystemExit, match="exists: move it away first"):
        _main(monkeypatch, "restore")  # never over a store that exists
    for path in before:
        Path(path).unlink()
    _main(monkeypatch, "restore")
    assert {p: _rows(Path(p)) for p in before} == before


def test_save_without_a_store_is_an_error(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="nothing to save"):
        _main(monkeypatch, "save")
    assert not Path("results/study/store").exists()  # nothing written
