"""Shared fixtures: a small corpus, a session token cache, a tiny-spec writer, a tmp MLflow URI."""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import minimind.data
from minimind.data.config import EMBEDDED_CORPORA

# The head of the embedded corpus: enough text for a 320-token BPE and a few validation batches,
# small enough that the tokenizer trains in well under a second.
SMALL_CORPUS_BYTES = 120_000

TINY_SPEC: dict[str, Any] = {
    "name": "tiny",
    "model": {
        "preset": "tiny",
        "dim": 32,
        "n_layers": 1,
        "n_heads": 2,
        "n_kv_heads": 1,
        "vocab_size": 320,
        "max_seq_len": 32,
    },
    "data": {"tokenizer": {"vocab_size": 320}},
    "train": {
        "steps": 12,
        "batch_size": 4,
        "seq_len": 32,
        "schedule": {"warmup": 2},
        "eval_every": 6,
        "eval_batches": 2,
        "log_every": 3,
        "checkpoint_every": 6,
        "sample_tokens": 8,
    },
    "seeds": [0],
}


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A .txt corpus: the first SMALL_CORPUS_BYTES of tinyshakespeare."""
    source = Path(minimind.data.__file__).parent / "corpora" / EMBEDDED_CORPORA["tinyshakespeare"]
    with gzip.open(source, "rb") as f:
        text = f.read(SMALL_CORPUS_BYTES)
    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    path.write_bytes(text)
    return path


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One token cache per test session, so each tokenizer is trained once."""
    return tmp_path_factory.mktemp("data-cache")


@pytest.fixture(scope="session", autouse=True)
def _compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Compiled runs of the tests cache their graphs in the session's tmp folder, not results/."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINIMIND_COMPILE_CACHE_DIR", str(tmp_path_factory.mktemp("compile-cache")))
        yield


@pytest.fixture
def one_thread() -> Any:
    """Tiny models run fastest on one thread, and cross-process bitwise checks need equal counts."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def _empty_mlflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow sqlite database with its schema created (the migrations take seconds)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def mlflow_uri(tmp_path: Path, _empty_mlflow_db: Path) -> str:
    """A fresh MLflow database in tmp_path (a copy of an empty, migrated one)."""
    shutil.copyfile(_empty_mlflow_db, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path}/mlflow.db"


def deep_update(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_update(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@pytest.fixture
def tiny_spec(
    tmp_path: Path, small_corpus: Path, data_cache: Path
) -> Callable[..., dict[str, Any]]:
    """`tiny_spec(**changes)`: the TINY_SPEC tree deep-updated with `changes`, writing only into
    tmp_path (checkpoints; MLflow at the `mlflow_uri` fixture's address, which a test that runs
    the tracker should request, so that the database is a quick copy) and the data cache."""

    def make(**changes: Any) -> dict[str, Any]:
        local = {
            "data": {"corpus": str(small_corpus), "cache_dir": str(data_cache)},
            "train": {"checkpoint_dir": str(tmp_path / "checkpoints")},
            "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db"},
        }
        return deep_update(deep_update(TINY_SPEC, local), changes)

    return make


@pytest.fixture
def write_spec(tmp_path: Path, tiny_spec: Callable[..., dict[str, Any]]) -> Callable[..., Path]:
    """`write_spec(**changes)` -> path of a YAML file holding `tiny_spec(**changes)`."""

    def write(**changes: Any) -> Path:
        tree = tiny_spec(**changes)
        path = tmp_path / f"{tree['name']}.yaml"
        path.write_text(yaml.safe_dump(tree, sort_keys=False))
        return path

    return write


EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
# Shipped specs that read a corpus `minimind data assemble` builds: tests/data/test_data_assemble.py
# loads text_domains.yaml over a fixture corpus, and the tests that load every shipped spec load
# these over `assembled_corpus`.
NEEDS_ASSEMBLED_CORPUS = ("text_domains.yaml", "ladder.yaml")
ASSEMBLED_DOMAINS = ("sotu", "shakespeare", "bible", "python_docs", "python_code", "wordnet", "postgres_docs")  # fmt: skip


@pytest.fixture
def assembled_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`tmp_path` as the working directory, with `results/corpus/<domain>/` laid out as
    `minimind data assemble` writes it (a train and a validation JSONL file of two documents
    each), so that a spec reading the assembled corpus loads and dry-runs."""
    monkeypatch.chdir(tmp_path)
    for domain in ASSEMBLED_DOMAINS:
        folder = tmp_path / "results" / "corpus" / domain
        folder.mkdir(parents=True)
        for split in ("train", "validation"):
            lines = [json.dumps({"text": f"{domain} {split} document {k}."}) for k in range(2)]
            (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def shipped_specs(*patterns: str) -> list[Path]:
    """The specs under experiments/ matching `patterns`, less those that need an assembled
    corpus."""
    return sorted(
        path
        for pattern in patterns
        for path in EXPERIMENTS.glob(pattern)
        if path.name not in NEEDS_ASSEMBLED_CORPUS
    )
