"""`minimind compare` on a store written by a real `minimind run` of a tiny two-variant,
two-seed spec; every expectation is recomputed from MLflow with MlflowClient directly."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from minimind.cli import main
from minimind.compare import compare, load_runs
from minimind.compare.report import ARTIFACT_PATH, write_report
from minimind.training.device import autocast_dtype

CORPUS = Path(__file__).parents[2] / "minimind" / "data" / "corpora" / "tinyshakespeare.txt.gz"

SPEC = """
name: cmp
model: {preset: tiny, dim: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1, vocab_size: 320,
        max_seq_len: 32}
data: {corpus: corpus.txt, tokenizer: {vocab_size: 300}, cache_dir: cache}
train: {steps: 8, batch_size: 4, seq_len: 32, schedule: {warmup: 2}, eval_every: 4,
        eval_batches: 2, log_every: 2, checkpoint_every: 8, checkpoint_dir: ckpt,
        sample_tokens: 0, device: cpu}
seeds: [0, 1]
ablate: {model.norm: [layernorm, rmsnorm]}
tracking: {uri: "sqlite:///mlflow.db"}
"""


@pytest.fixture(scope="module")
def real_store(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Really run the spec (4 runs of 8 steps) in a temporary directory."""
    root = tmp_path_factory.mktemp("real_run")
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        (root / "corpus.txt").write_text(f.read(30_000))
    (root / "spec.yaml").write_text(SPEC)
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.chdir(root)
        code = main(["run", "spec.yaml"])
    assert code == 0, out.getvalue()
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("cmp")
    children = client.search_runs(
        [experiment.experiment_id], "tags.`minimind.role` = 'child'", max_results=100
    )
    return {"uri": uri, "root": root, "out": out.getvalue(), "client": client, "runs": children}


def _history(client: MlflowClient, run_id: str, key: str) -> list[float]:
    return [m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def test_run_ends_with_the_comparison_table(real_store) -> None:
    out = real_store["out"]
    table = out[out.index("grouped by variant") :].splitlines()
    header = next(i for i, line in enumerate(table) if line.startswith("norm "))
    rows = {line.split()[0]: line.split()[1] for line in table[header + 2 : header + 4]}
    assert rows == {"layernorm": "2", "rmsnorm": "2"}


def test_aggregates_match_mlflow(real_store) -> None:
    client, runs = real_store["client"], real_store["runs"]
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}
    c = compare(load_runs(real_store["uri"], ["cmp"]))
    assert set(c.table["variant"]) == {"norm=layernorm", "norm=rmsnorm"}
    for _, row in c.table.iterrows():
        mine = [r for r in runs if r.data.tags["variant"] == row["variant"]]
        final = [_history(client, r.info.run_id, "val/bpb")[-1] for r in mine]
        loss = [_history(client, r.info.run_id, "val/loss")[-1] for r in mine]
        # The best sampled evaluation (the exact final value is its own column).
        best = min(min(_history(client, r.info.run_id, "val/bpb_sampled")) for r in mine)
        tps = np.median(
            [np.median(_history(client, r.info.run_id, "perf/tokens_per_s")) for r in mine]
        )
        assert row["n"] == 2
        assert row["val/bpb_mean"] == pytest.approx(sum(final) / 2)
        assert row["val/bpb_std"] == pytest.approx(abs(final[0] - final[1]) / np.sqrt(2))
        assert row["val/loss_mean"] == pytest.approx(sum(loss) / 2)
        assert row["val/bpb_best"] == pytest.approx(best)
        assert row["perf/tokens_per_s_median"] == pytest.approx(tps)
        assert row["num_params"] == int(mine[0].data.params["num_params"])
    means = c.table["val/bpb_mean"].tolist()
    assert means == sorted(means)  # best first
    assert c.baseline == "norm=layernorm"  # the spec's first variant


def test_json_on_a_real_store(real_store, capsys) -> None:
    assert main(["compare", "cmp", "--tracking-uri", real_store["uri"], "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["val/bpb_n"] for r in doc["rows"]] == [2, 2]
    other = next(r for r in doc["rows"] if not r["is_baseline"])
    assert other["val/bpb_delta_method"] == "paired"  # seeds 0 and 1 on both sides
    assert other["val/bpb_delta_low"] <= other["val/bpb_delta"] <= other["val/bpb_delta_high"]
    assert doc["failed_runs"] == []


def test_report_on_a_real_store(real_store, tmp_path) -> None:
    index = write_report(compare(load_runs(real_store["uri"], ["cmp"])), tmp_path)
    pngs = sorted(p.stem for p in tmp_path.glob("*.png"))
    assert pngs == ["curves_train_loss", "curves_val_bpb", "final", "pareto"]  # dense: no MoE
    page = index.read_text()
    assert page.count("data:image/png;base64,") == 4 and "git commit" in page
    precision = "fp32" if autocast_dtype("auto", torch.device("cpu"), 32) is None else "bf16"
    md = (tmp_path / "report.md").read_text()
    assert "- **device**: cpu\n" in md and f"- **precision**: {precision}\n" in md
    assert "<dt>device</dt><dd>cpu</dd>" in page
    parent = real_store["runs"][0].data.tags["mlflow.parentRunId"]
    logged = {Path(a.path).name for a in real_store["client"].list_artifacts(parent, ARTIFACT_PATH)}
    assert "index.html" in logged
