"""Carry the study's runs from one machine to the next: the MLflow and Optuna stores.

    python scripts/study_store.py save      # results/{mlflow,optuna}.db -> results/study/store/*.xz
    python scripts/study_store.py restore   # and back, where results/ holds no store yet
    python scripts/study_store.py restore --if-absent   # the same, and nothing where both exist

`make study` trains into the default stores, results/mlflow.db (runs) and results/optuna.db (the
tuning sweeps), which git ignores. The study takes hours; to continue it on another machine or a
fresh clone, `save` after stopping it (Ctrl-C ends the running runs KILLED) and commit
results/study/store/; `make study` restores them there first (`--if-absent`: a clone without
stores gets the committed runs, a machine with its own keeps them), then skips every finished run
and retrains the interrupted ones from their first step (checkpoints stay behind; a seed
retrains to the same numbers). Each database is copied with sqlite's online backup, so a copy is
consistent even while a reader has it open, and written atomically; `restore` never overwrites
a store that exists. The runs' artifacts (spec.yaml, loss plots) stay behind: MLflow records
their absolute paths, which `restore` points at this checkout's results/artifacts/ (from the
checkout `save` ran in, `root.txt`), so that what the continued study logs lands here.
"""

from __future__ import annotations

import argparse
import lzma
import shutil
import sqlite3
import sys
import tempfile
from contextlib import closing
from pathlib import Path

STORES = (Path("results/mlflow.db"), Path("results/optuna.db"))
SAVED = Path("results/study/store")
ROOT = SAVED / "root.txt"
EXIT_BAD_INPUT = 2  # as every minimind command: nothing was written


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


def _backup(source: Path, target: Path) -> None:
    """A consistent copy of the sqlite database `source` at `target`."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
        dst.execute("VACUUM")


def _move_artifacts(store: Path, old_root: str, new_root: str) -> None:
    """Point the MLflow store's artifact paths under `old_root` at `new_root`."""
    with closing(sqlite3.connect(store)) as db, db:
        for table, column in (("experiments", "artifact_location"), ("runs", "artifact_uri")):
            db.execute(
                f"UPDATE {table} SET {column} = replace({column}, ?, ?)", (old_root, new_root)
            )


def save() -> None:
    for store in STORES:
        if not store.exists():
            _fail(f"{store} not found: nothing to save (run make study first)")
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
    ROOT.write_text(f"{Path.cwd()}\n", encoding="utf-8")


def restore(if_absent: bool = False) -> None:
    """The saved stores into results/; with `if_absent`, only where neither exists yet (a
    machine that trained into its own stores continues in them)."""
    existing = [store for store in STORES if store.exists()]
    if if_absent and len(existing) == len(STORES):
        print(f"{', '.join(map(str, existing))} exist: the study continues in them (not restored)")
        return
    for store in STORES:
        packed = SAVED / f"{store.name}.xz"
        if store.exists():
            _fail(f"{store} exists: move it away first, restore never overwrites a store")
        if not packed.exists():
            _fail(f"{packed} not found: nothing to restore")
    old_root = ROOT.read_text(encoding="utf-8").strip() if ROOT.exists() else None
    for store in STORES:
        partial = store.with_suffix(".db.partial")
        with lzma.open(SAVED / f"{store.name}.xz", "rb") as packed, partial.open("wb") as raw:
            shutil.copyfileobj(packed, raw)
        if store == STORES[0] and old_root is not None:
            _move_artifacts(partial, old_root, str(Path.cwd()))
        partial.replace(store)
        print(f"restored {store}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["save", "restore"])
    parser.add_argument(
        "--if-absent",
        action="store_true",
        help="restore: nothing where both stores exist (still an error where one alone does)",
    )
    args = parser.parse_args()
    if args.action == "save":
        save()
    else:
        restore(args.if_absent)
