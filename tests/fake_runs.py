"""Runs written straight into an MLflow store with the tags of `minimind.record`, as the
runner and the sweep write them: the fixtures of the comparison and study tests."""

from __future__ import annotations

from mlflow import MlflowClient
from mlflow.entities import Metric, Param


def log_child(
    client: MlflowClient,
    exp_id: str,
    parent_id: str,
    variant: str,
    seed: int,
    start: int,
    *,
    params: dict[str, str],
    metrics: list[Metric],
    status: str = "FINISHED",
    tags: dict[str, str] | None = None,
    run_name: str | None = None,
) -> str:
    run_tags = {
        "mlflow.parentRunId": parent_id,
        "minimind.role": "child",
        "variant": variant,
        "seed": str(seed),
        "spec_hash": "abc123def456",
        "git_commit": "0123456789abcdef",
        **(tags or {}),
    }
    run = client.create_run(
        exp_id, start_time=start, tags=run_tags, run_name=run_name or f"{variant}/seed{seed}"
    )
    run_id = run.info.run_id
    client.log_batch(run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()])
    client.set_terminated(run_id, status=status, end_time=start + 40_000)
    return run_id


def log_parent(client: MlflowClient, exp_id: str, name: str, start: int) -> str:
    tags = {"minimind.role": "parent", "spec_hash": "abc123def456", "git_commit": "0123456789ab"}
    run = client.create_run(exp_id, start_time=start, tags=tags, run_name=name)
    client.log_batch(run.info.run_id, params=[Param("name", name), Param("train.device", "cpu")])
    client.set_terminated(run.info.run_id, "FINISHED", end_time=start + 500_000)
    return run.info.run_id


# What a run measured of the machine it ran on, not of the model: left out of bit-for-bit checks.
MACHINE_METRICS = ("perf/", "sys/", "time/")


def children(uri: str, experiment: str) -> dict[str, object]:
    """The experiment's newest child run of each name."""
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs(
        [found.experiment_id],
        "tags.`minimind.role` = 'child'",
        order_by=["attributes.start_time DESC"],
    )
    newest: dict[str, object] = {}
    for run in runs:
        newest.setdefault(run.info.run_name, run)
    return newest


def curves(uri: str, run) -> dict[str, list[tuple[int, float]]]:
    """Every metric's (step, value) points but the machine's (speed, memory, time): what bit
    for bit compares."""
    client = MlflowClient(uri)
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        for key in run.data.metrics
        if not key.startswith(MACHINE_METRICS)
    }
