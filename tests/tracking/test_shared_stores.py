"""Stores shared by processes started at once: the MLflow database, the Optuna storage and the
token cache are created once, under a file lock, whichever process gets there first.

Real processes race on fresh files; each round starts them together behind a barrier, and the
rounds repeat because a race that loses sometimes must be caught every time.
"""

from __future__ import annotations

import multiprocessing
import traceback
from pathlib import Path

import pytest

PROCESSES = 4
ROUNDS = 4


def _open_mlflow(db: Path) -> None:
    from minimind.tracking import Tracker

    Tracker(f"sqlite:///{db}", "race")


def _open_optuna(db: Path) -> None:
    from minimind.spec import SweepConfig
    from minimind.sweep.storage import open_storage

    storage = open_storage(SweepConfig(storage=f"sqlite:///{db}"))
    storage.get_all_studies()


def _prepare_tokens(cache: Path, corpus: Path) -> None:
    from minimind.data.config import DataConfig
    from minimind.data.prepare import prepare_data

    cfg = DataConfig(corpus=str(corpus), cache_dir=str(cache), tokenizer={"vocab_size": 320})
    data = prepare_data(cfg)
    assert len(data.train_tokens) > 0


OPENERS = {"mlflow": _open_mlflow, "optuna": _open_optuna, "tokens": _prepare_tokens}


def _worker(kind: str, paths: list[tuple], barrier, errors) -> None:  # noqa: ANN001
    for args in paths:
        barrier.wait(timeout=240)
        try:
            OPENERS[kind](*args)
        except BaseException:  # every failure is the finding, whatever its type
            errors.put(traceback.format_exc())


def _race(kind: str, paths: list[tuple]) -> list[str]:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    errors = context.Queue()
    workers = [
        context.Process(target=_worker, args=(kind, paths, barrier, errors))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    found = []
    while not errors.empty():
        found.append(errors.get())
    for worker in workers:
        if worker.exitcode is None:  # stuck: a lock never released is a failure too
            worker.kill()
            found.append(f"worker {worker.pid} hung")
        elif worker.exitcode != 0:
            found.append(f"worker {worker.pid} exited {worker.exitcode}")
    return found


@pytest.mark.slow
def test_processes_creating_one_mlflow_database_at_once_all_succeed(tmp_path: Path) -> None:
    rounds = [(tmp_path / f"round{r}" / "mlflow.db",) for r in range(ROUNDS)]
    assert _race("mlflow", rounds) == []
    for (db,) in rounds:  # and the database serves a later process
        _open_mlflow(db)


@pytest.mark.slow
def test_processes_creating_one_optuna_storage_at_once_all_succeed(tmp_path: Path) -> None:
    rounds = [(tmp_path / f"round{r}" / "optuna.db",) for r in range(ROUNDS)]
    assert _race("optuna", rounds) == []


@pytest.mark.slow
def test_processes_preparing_one_token_cache_at_once_all_succeed(
    tmp_path: Path, small_corpus: Path
) -> None:
    rounds = [(tmp_path / f"round{r}", small_corpus) for r in range(ROUNDS)]
    assert _race("tokens", rounds) == []
    tokenizers = [list((tmp_path / f"round{r}" / "tokenizers").iterdir()) for r in range(ROUNDS)]
    tokens = [list((tmp_path / f"round{r}" / "tokens").iterdir()) for r in range(ROUNDS)]
    # one tokenizer and one token entry per cache: the tokenizer was trained once, not raced
    assert [len(t) for t in tokenizers] == [1] * ROUNDS
    assert [len(t) for t in tokens] == [1] * ROUNDS
