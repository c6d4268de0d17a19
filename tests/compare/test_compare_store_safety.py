"""What `minimind compare --report` takes from a store: no password reaches a report, and no
name from the store leads the report outside its folder or through a planted link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric

from minimind.cli import main
from minimind.compare import compare, load_runs
from minimind.compare.report import write_report

T0 = 1_700_000_000_000
SECRET = "s3cr/et"  # a '/' in a password: the form a pattern used to miss
STORED_URI = f"postgresql://lab:{SECRET}@db.example:5432/runs"


def _curves(seed: int, start: int) -> list[Metric]:
    return [
        *(Metric("train/loss", 3.0 - 0.1 * s + 0.01 * seed, start + s, s) for s in range(1, 6)),
        Metric("val/bpb", 2.0 + 0.01 * seed, start + 5, 5),
        Metric("val/loss", 1.5 + 0.01 * seed, start + 5, 5),
    ]


def _experiment(client: MlflowClient, root: Path, name: str, params: dict[str, str]) -> str:
    exp = client.create_experiment(name, artifact_location=str(root / "artifacts" / "x"))
    parent = log_parent(client, exp, "p", T0)
    for variant in ("model.norm=layernorm", "model.norm=rmsnorm"):
        for seed in range(2):
            log_child(
                client, exp, parent, variant, seed, T0 + 1000 * (seed + 1),
                params={**params, "model.norm": variant.split("=")[1], "seeds": "[0, 1]"},
                metrics=_curves(seed, T0 + 1000 * (seed + 1)),
            )  # fmt: skip
    return parent


@pytest.fixture
def store(tmp_path: Path) -> dict:
    root = tmp_path / "store"
    uri = f"sqlite:///{root}/mlflow.db"
    root.mkdir()
    client = MlflowClient(uri)
    old = _experiment(client, root, "old", {"tracking.uri": STORED_URI, "name": "old"})
    escaping = _experiment(client, root, "../../../escaped_report", {"name": "x"})
    return {"uri": uri, "old": old, "escaping": escaping}


def test_a_report_shows_no_password_of_the_store_or_of_its_params(store, tmp_path) -> None:
    # The URI the report names, and a param stored by an earlier version, password and all.
    runset = load_runs(store["uri"], ["old"], all_runs=True)
    runset.tracking_uri = store["uri"] + "?password=hunter2"
    assert runset.runs["params.tracking.uri"].iloc[0] == "postgresql://lab@db.example:5432/runs"
    index = write_report(compare(runset), tmp_path / "report", log_to_parent=False)
    assert store["uri"] in index.read_text()
    for page in index.parent.iterdir():
        assert SECRET.encode() not in page.read_bytes() and b"hunter2" not in page.read_bytes()


def test_an_experiment_name_from_the_store_cannot_lead_the_report_outside(
    store, tmp_path, monkeypatch, capsys
) -> None:
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    argv = ["compare", "--parent", store["escaping"], "--report", "--tracking-uri", store["uri"]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: experiment name in the store: ") and err.count("\n") == 1
    assert not list(tmp_path.rglob("index.html"))


def test_a_report_replaces_a_planted_link_rather_than_writing_through_it(store, tmp_path) -> None:
    folder, target = tmp_path / "report", tmp_path / "elsewhere.html"
    folder.mkdir()
    target.write_text("untouched")
    os.symlink(target, folder / "index.html")
    runset = load_runs(store["uri"], ["old"], all_runs=True)
    index = write_report(compare(runset), folder, log_to_parent=False)
    assert target.read_text() == "untouched"
    assert not index.is_symlink() and "<html" in index.read_text()
