"""Carry the study's runs from one machine to the next: the MLflow and Optuna stores.

    python scripts/study_store.py save      # results/{mlflow,optuna}.db -> results/study/store/*.xz
    python scripts/study_store.py restore   # and back, where results/ holds no store yet

`make study` trains into the default stores, results/mlflow.db (runs) and results/optuna.db (the
tuning sweeps), which git ignores. The study takes hours; to continue it on another machine or a
fresh clone, `save` after stopping it (Ctrl-C ends the running runs KILLED) and commit
results/study/store/, then `restore` there before `make study`, which skips every finished run
and retrains the interrupted ones from their first step (checkpoints stay behind; a seed
retrains to the same numbers). Each database is copied with sqlite's online backup, so a copy is
consistent even while a reader has it open, and written atomically; `restore` never overwrites
a store that exists.
"""

from __future__ import annotations

import argparse
import lzma
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

STORES = (Path("results/mlflow.db"), Path("results/optuna.db"))
SAVED = Path("results/study/store")


def _backup(source: Path, target: Path) -> None:
    """A consistent copy of the sqlite database `source` at `target`."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    with sqlite3.connect(target) as dst:
        dst.execute("VACUUM")


def save() -> None:
    for store in STORES:
        if not store.exists():
            sys.exit(f"error: {store} not found: nothing to save (run make study first)")
    SAVED.mkdir(parents=True, exist_ok=True)
    for store in STORES:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / store.name
            _backup(store, copy)
            partial = SAVED / f".{store.name}.xz.partial"
            with copy.open("rb") as raw, lzma.open(partial, "wb", preset=6) as packed:
                shutil.copyfileobj(raw, packed)
            partial.replace(SAVED / f"{store.name}.xz")
        print(f"saved {store} to {SAVED / (store.name + '.xz')}")


def restore() -> None:
    for store in STORES:
        packed = SAVED / f"{store.name}.xz"
        if store.exists():
            sys.exit(f"error: {store} exists: move it away first, restore never overwrites a store")
        if not packed.exists():
            sys.exit(f"error: {packed} not found: nothing to restore")
    for store in STORES:
        partial = store.with_suffix(".db.partial")
        with lzma.open(SAVED / f"{store.name}.xz", "rb") as packed, partial.open("wb") as raw:
            shutil.copyfileobj(packed, raw)
        partial.replace(store)
        print(f"restored {store}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["save", "restore"])
    {"save": save, "restore": restore}[parser.parse_args().action]()
