"""The probe figures of `minimind compare --report` and a probe as the comparison's metric."""

from __future__ import annotations

import pytest
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric

from minimind.cli import main
from minimind.compare import CompareOptions, compare, load_runs
from minimind.compare.probe_plots import FIGURE_CAPTIONS, probe_figures

T0 = 1_700_000_000_000
ARMS = {"block=prenorm": 2.0, "block=postnorm": 8.0}  # attention logit growth per step


def _probes(growth: float, seed: int, start: int) -> list[Metric]:
    out = []
    for step in range(5, 31, 5):
        ts = start + step
        out += [
            Metric(f"probe/attn_max_logit/layer{i}", growth * step + seed, ts, step)
            for i in range(2)
        ]
        out += [
            Metric(f"probe/resid_rms/layer{i}", (i + 1) * growth + seed, ts, step) for i in range(2)
        ]
    for step in range(10, 31, 10):
        out += [Metric("probe/spike/loss", -1.0 + seed, start + step, step)]
        out += [Metric("probe/spike/grad_norm", 0.5 * seed, start + step, step)]
        out += [Metric("train/loss", 5.0 - step / 10, start + step, step)]
    out += [Metric("val/bpb", 3.0 + growth / 10, start + 30, 30)]
    return out


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("probes", artifact_location=str(root / "artifacts"))
    parent = log_parent(client, exp, "probes", T0)
    start = T0 + 1000
    for variant, growth in ARMS.items():
        for seed in range(3):
            params = {"train.steps": "30", "train.spike.sigma": "6.0", "seeds": "[0, 1, 2]"}
            log_child(
                client, exp, parent, variant, seed, start, params=params,
                metrics=_probes(growth, seed, start),
            )  # fmt: skip
            start += 1000
    return uri


def test_probe_figures_are_drawn_per_arm(uri) -> None:
    comparison = compare(load_runs(uri, ["probes"]), CompareOptions(baseline="block=prenorm"))
    figures = probe_figures(comparison)
    assert list(figures) == list(FIGURE_CAPTIONS)
    logits = figures["probe_attn_max_logit"]
    assert [ax.get_title() for ax in logits.axes] == ["layer0", "layer1"]
    # the post-norm arm's mean curve: growth 8 per step plus the mean seed offset 1
    lines = {line.get_label(): line for line in logits.axes[1].lines}
    post = lines["postnorm (n=3)"]
    assert list(post.get_xdata()) == [5, 10, 15, 20, 25, 30]
    assert list(post.get_ydata()) == pytest.approx([8 * s + 1 for s in range(5, 31, 5)])
    resid = figures["probe_resid_rms"].axes[0]
    bars = {c.get_label(): c.lines[0] for c in resid.containers}  # errorbar: mean ± std
    assert list(bars["postnorm"].get_ydata()) == pytest.approx([9.0, 17.0])  # (i+1)·8 + 1
    spike = figures["probe_spike"].axes[0]
    assert any(list(line.get_ydata()) == [6.0, 6.0] for line in spike.lines)  # the threshold


def test_a_comparison_without_probes_has_no_probe_figures(uri) -> None:
    runset = load_runs(uri, ["probes"])
    keep = [c for c in runset.runs.columns if not c.startswith("metrics.probe/")]
    runset.runs = runset.runs[keep]
    assert probe_figures(compare(runset)) == {}


def test_any_probe_is_a_metric_of_compare(uri, capsys, tmp_path) -> None:
    code = main(
        [
            "compare", "probes", "--tracking-uri", uri, "--metric", "probe/attn_max_logit/layer1",
            "--report", "--report-dir", str(tmp_path),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "probe/attn_max_logit/layer1" in out
    assert "241.0000 ± 1.0000" in out and "61.0000 ± 1.0000" in out  # growth·30 + seed
    for stem in FIGURE_CAPTIONS:
        assert (tmp_path / f"{stem}.png").exists()


def test_a_seed_band_is_sorted_by_step_when_seeds_logged_different_steps() -> None:
    """Seeds a time limit stopped apart log different steps: the band (and so every curve and
    the step-to-tokens map, which interpolates on it) runs in step order."""
    from types import SimpleNamespace

    import pandas as pd

    from minimind.compare.plots import seed_band

    histories = {
        "a": pd.Series([3.0, 2.0, 1.5], index=[0, 10, 20]),
        "b": pd.Series([3.2, 2.2, 1.9], index=[0, 10, 15]),
    }
    runset = SimpleNamespace(history=lambda run_id, key: histories[run_id])
    band = seed_band(SimpleNamespace(runset=runset), ["a", "b"], "val/bpb_sampled")
    assert list(band.index) == [0, 10, 15, 20]
    assert band.loc[15, "mean"] == 1.9 and band.loc[20, "mean"] == 1.5
    assert list(band["n"]) == [2, 2, 1, 1]
