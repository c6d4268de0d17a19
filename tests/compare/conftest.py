"""The synthetic store of the `minimind compare` tests (`norm_store`), written once per module."""

from __future__ import annotations

import pytest
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric
from norm_store import (
    LN,
    RMS,
    T0,
    norm_curves,
    norm_params,
)

from minimind.compare import (
    compare,
    load_runs,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A store with experiments `norm` (an old invocation and the latest one, 2 variants × 3
    seeds plus a failed and a killed run), `mlp` (dense vs MoE, 2 seeds) and `empty`."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    norm = client.create_experiment("norm", artifact_location=str(root / "artifacts" / "norm"))
    old = log_parent(client, norm, "norm-old", T0)
    log_child(
        client, norm, old, "model.norm=oldvariant", 0, T0 + 1000,
        params=norm_params(LN, 0), metrics=norm_curves(LN, 0, T0 + 1000),
    )  # fmt: skip
    parent = log_parent(client, norm, "norm", T0 + 100_000)
    start = T0 + 101_000
    for variant in (LN, RMS):
        for seed in range(3):
            log_child(
                client, norm, parent, variant, seed, start,
                params=norm_params(variant, seed), metrics=norm_curves(variant, seed, start),
                tags={"component.norm": variant.split("=")[1]},
            )  # fmt: skip
            start += 1000
    log_child(
        client, norm, parent, RMS, 3, start, params=norm_params(RMS, 3),
        metrics=[Metric("train/loss", 9.0, start, 1)], status="FAILED",
        tags={"failure_reason": "FloatingPointError: loss is NaN at step 2", "component.norm": "rmsnorm"},
    )  # fmt: skip
    log_child(
        client, norm, parent, LN, 3, start + 1000, params=norm_params(LN, 3), metrics=[],
        status="KILLED",
        tags={"failure_reason": "KeyboardInterrupt (SIGINT)", "component.norm": "layernorm"},
    )  # fmt: skip
    mlp = client.create_experiment("mlp", artifact_location=str(root / "artifacts" / "mlp"))
    mlp_parent = log_parent(client, mlp, "mlp", T0 + 200_000)
    start = T0 + 201_000
    for variant, kind in (("model.mlp=swiglu", "swiglu"), ("model.mlp=moe", "moe")):
        for seed in range(2):
            curves = norm_curves(LN, seed, start)
            if kind == "moe":
                curves += [Metric("moe/load_cv", 1.0 / s, start + s, s) for s in range(1, 11)]
            log_child(
                client, mlp, mlp_parent, variant, seed, start,
                params={**norm_params(LN, seed), "model.mlp": kind}, metrics=curves,
                tags={"component.mlp": kind},
            )  # fmt: skip
            start += 1000
    client.create_experiment("empty", artifact_location=str(root / "artifacts" / "empty"))
    return {"uri": uri, "root": root, "parent": parent, "old_parent": old, "mlp_parent": mlp_parent}


@pytest.fixture(scope="module")
def norm(store: dict):
    return compare(load_runs(store["uri"], ["norm"]))
