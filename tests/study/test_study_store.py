"""scripts/study_store.py: the study's stores saved compressed and restored, never overwritten."""

from __future__ import annotations

import runpy
import shutil
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "study_store.py"


def _main(monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv])
    runpy.run_path(str(SCRIPT), run_name="__main__")


def _rows(path: Path) -> list[tuple]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute("select * from t order by k").fetchall()


def test_saved_stores_restore_to_the_same_rows(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("results").mkdir()
    for name, rows in (("mlflow", 300), ("optuna", 7)):
        with closing(sqlite3.connect(f"results/{name}.db")) as db, db:
            db.execute("create table t (k integer primary key, v text)")
            db.executemany("insert into t values (?, ?)", [(i, f"{name}{i}") for i in range(rows)])
    with closing(sqlite3.connect("results/mlflow.db")) as db, db:  # MLflow's artifact paths
        db.execute("create table experiments (artifact_location text)")
        db.execute("create table runs (artifact_uri text)")
        db.execute("insert into experiments values (?)", (f"{tmp_path}/results/artifacts",))
        db.execute("insert into runs values (?)", (f"{tmp_path}/results/artifacts/1/abc",))
    before = {p: _rows(Path(p)) for p in ("results/mlflow.db", "results/optuna.db")}
    _main(monkeypatch, "save")
    assert sorted(p.name for p in Path("results/study/store").iterdir()) == [
        "mlflow.db.xz",
        "optuna.db.xz",
        "root.txt",
    ]
    with pytest.raises(SystemExit) as stopped:
        _main(monkeypatch, "restore")  # never over a store that exists
    assert stopped.value.code == 2
    for path in before:
        Path(path).unlink()
    _main(monkeypatch, "restore")
    assert {p: _rows(Path(p)) for p in before} == before


def test_restore_points_the_artifact_paths_at_this_checkout(tmp_path, monkeypatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for checkout in (first, second):
        (checkout / "results").mkdir(parents=True)
    monkeypatch.chdir(first)
    with closing(sqlite3.connect("results/mlflow.db")) as db, db:
        db.execute("create table experiments (artifact_location text)")
        db.execute("create table runs (artifact_uri text)")
        db.execute("insert into experiments values (?)", (f"{first}/results/artifacts",))
        db.execute("insert into runs values (?)", (f"{first}/results/artifacts/1/abc/artifacts",))
    sqlite3.connect("results/optuna.db").close()
    _main(monkeypatch, "save")
    shutil.copytree(first / "results/study", second / "results/study")
    monkeypatch.chdir(second)
    _main(monkeypatch, "restore")
    with closing(sqlite3.connect("results/mlflow.db")) as db:
        assert db.execute("select artifact_location from experiments").fetchall() == [
            (f"{second}/results/artifacts",)
        ]
        assert db.execute("select artifact_uri from runs").fetchall() == [
            (f"{second}/results/artifacts/1/abc/artifacts",)
        ]


def test_save_without_a_store_is_an_error(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        _main(monkeypatch, "save")
    assert stopped.value.code == 2
    assert "nothing to save" in capsys.readouterr().err
    assert not Path("results/study/store").exists()  # nothing written


def test_restore_if_absent_keeps_stores_that_exist(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    Path("results").mkdir()
    for name in ("mlflow", "optuna"):
        with closing(sqlite3.connect(f"results/{name}.db")) as db, db:
            db.execute("create table t (k integer primary key, v text)")
            db.execute("insert into t values (1, 'saved')")
    with closing(sqlite3.connect("results/mlflow.db")) as db, db:  # MLflow's artifact paths
        db.execute("create table experiments (artifact_location text)")
        db.execute("create table runs (artifact_uri text)")
    _main(monkeypatch, "save")
    with closing(sqlite3.connect("results/mlflow.db")) as db, db:
        db.execute("update t set v = 'trained here since'")
    _main(monkeypatch, "restore", "--if-absent")  # `make study` on a machine with its stores
    assert "the study continues in them" in capsys.readouterr().out
    assert _rows(Path("results/mlflow.db")) == [(1, "trained here since")]
    Path("results/optuna.db").unlink()
    with pytest.raises(SystemExit) as stopped:  # one store alone: ambiguous, never overwritten
        _main(monkeypatch, "restore", "--if-absent")
    assert stopped.value.code == 2
    Path("results/mlflow.db").unlink()
    _main(monkeypatch, "restore", "--if-absent")  # a fresh clone: the committed runs
    assert _rows(Path("results/mlflow.db")) == [(1, "saved")]
