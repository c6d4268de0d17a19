"""`compare.runs`: which runs a comparison reads (the latest invocation, a parent, a spec hash,
a filter, several experiments) from its own store."""

from __future__ import annotations

import json

import mlflow
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from norm_store import (
    LN,
    RMS,
    T0,
    norm_curves,
    norm_params,
    run_cli,
    two_invocations,
)

from minimind.compare import (
    compare,
    load_runs,
)


def test_default_selection_is_the_latest_invocation(norm, store) -> None:
    assert store["parent"] in norm.runset.selection
    assert set(norm.runs["group"]) == {LN, RMS}
    assert len(norm.runs) == 8  # 6 finished + failed + killed; the old invocation is left out


def test_filter_across_experiments(store) -> None:
    runset = load_runs(store["uri"], ["norm", "mlp"], filter_string="tags.`component.mlp` = 'moe'")
    c = compare(runset)
    assert list(c.table["variant"]) == ["model.mlp=moe"] and c.table["n"].iloc[0] == 2
    moe_run = runset.runs["run_id"].iloc[0]
    assert runset.history(moe_run, "moe/load_cv").tolist() == [1.0 / s for s in range(1, 11)]


def test_loading_runs_reads_its_own_store_without_mlflows_global_uri(
    mlflow_uri, monkeypatch
) -> None:
    """Compare opens the store through the client it was given: MLflow's global tracking URI,
    which another thread may be using, is neither set nor read."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("own")
    parent = log_parent(client, exp, "own", T0)
    for seed in (0, 1):
        log_child(
            client, exp, parent, "norm=rmsnorm", seed, T0 + 1000 * (seed + 1),
            params=norm_params(RMS, seed), metrics=norm_curves(RMS, seed, T0),
        )  # fmt: skip

    def untouchable(*_: object) -> None:
        raise AssertionError("MLflow's global tracking URI was used")

    monkeypatch.setattr(mlflow, "set_tracking_uri", untouchable)
    monkeypatch.setattr(mlflow, "get_tracking_uri", untouchable)
    runset = load_runs(mlflow_uri, ["own"])
    assert sorted(runset.runs["seed"]) == [0, 1]
    assert list(runset.parents["run_id"]) == [parent]
    assert runset.runs["tags.variant"].tolist() == ["norm=rmsnorm"] * 2


def test_the_invocation_is_chosen_by_parent_or_spec_hash(mlflow_uri, capsys) -> None:
    """The default takes the latest invocation by start time (here a killed one of another
    spec) and says so; --spec-hash and --parent take the one asked for."""
    first, later = two_invocations(mlflow_uri)
    code, out, _ = run_cli(capsys, "pick", "--tracking-uri", mlflow_uri, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and [r["variant"] for r in doc["rows"]] == ["c"]
    assert later in doc["selection"] and "KILLED" in doc["selection"]
    assert "most recent by start time" in doc["selection"] and "--spec-hash" in doc["selection"]
    for option, value in (("--spec-hash", "1111aaaa"), ("--parent", first)):
        code, out, _ = run_cli(
            capsys, "pick", "--tracking-uri", mlflow_uri, "--format", "json", option, value
        )
        doc = json.loads(out)
        assert code == 0 and {r["variant"] for r in doc["rows"]} == {"a", "b"}, option
        assert first in doc["selection"] and "spec 1111aaaa" in doc["selection"]
    code, _, err = run_cli(capsys, "pick", "--tracking-uri", mlflow_uri, "--spec-hash", "ffff")
    assert code == 2 and err.startswith("error: --spec-hash: no invocation")


def test_a_spec_hash_in_a_store_without_invocations_is_an_error(mlflow_uri, capsys) -> None:
    """Runs logged without a parent run: no invocation has the hash, and none is pretended."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("orphans")
    run = client.create_run(exp, tags={"variant": "a", "seed": "0"})
    client.set_terminated(run.info.run_id)
    code, out, err = run_cli(capsys, "orphans", "--tracking-uri", mlflow_uri, "--spec-hash", "ab")
    assert code == 2 and out == "" and err.startswith("error: --spec-hash: no invocation")
