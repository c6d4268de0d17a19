"""The held-out suite in `minimind compare`: Δ per domain as one corrected family, SNR per metric,
`--metric val/bpb_macro`, the figure of Δ by domain, and the report's per-domain section."""

from __future__ import annotations

import numpy as np
import pytest
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric
from scipy import stats
from statsmodels.stats.multitest import multipletests

from minimind.cli import main
from minimind.compare.domains import domain_table, suite_metrics, suite_signal_to_noise
from minimind.compare.runs import load_runs
from minimind.compare.table import CompareOptions

T0 = 1_700_000_000_000
ARMS = ["mix=base", "mix=prose", "mix=code"]
# Each domain's effect of each arm: the prose arm helps no domain but costs code, and so on.
EFFECTS = {
    "code": {"mix=base": 0.0, "mix=prose": 0.06, "mix=code": -0.03},
    "prose": {"mix=base": 0.0, "mix=prose": -0.04, "mix=code": 0.001},
    "wordnet": {"mix=base": 0.0, "mix=prose": 0.0, "mix=code": 0.0},
}
SEEDS = range(4)


def value(domain: str, arm: str, seed: int) -> float:
    rng = np.random.default_rng([list(EFFECTS).index(domain), list(ARMS).index(arm), seed])
    return 1.5 + EFFECTS[domain][arm] + 0.01 * seed + 0.004 * rng.standard_normal()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("mix", artifact_location=str(root / "artifacts"))
    parent = log_parent(client, exp, "mix", T0)
    start = T0 + 1000
    for arm in ARMS:
        for seed in SEEDS:
            values = {d: value(d, arm, seed) for d in EFFECTS}
            metrics = [Metric(f"val/{d}/bpb", v, start, 10) for d, v in values.items()]
            metrics += [Metric(f"val/{d}/bpb_sampled", v, start, 10) for d, v in values.items()]
            macro = float(np.mean(list(values.values())))
            metrics += [
                Metric("val/bpb_macro", macro, start, 10),
                Metric("val/bpb_macro_sampled", macro, start, 10),
                Metric("val/bpb", values["prose"], start, 10),
            ]
            params = {"name": "mix", "data.sources.prose.weight": arm, "seeds": "[0, 1, 2, 3]"}
            log_child(
                client, exp, parent, arm, seed, start, params=params, metrics=metrics
            )  # fmt: skip
            start += 1000
    return uri


def test_each_domain_delta_is_one_family_corrected_together(store):
    runset = load_runs(store, ["mix"])
    assert suite_metrics(runset) == ["val/code/bpb", "val/prose/bpb", "val/wordnet/bpb"]
    table = domain_table(runset, CompareOptions())
    assert len(table) == 3 * 2 and set(table["baseline"]) == {"mix=base"}
    raw = []
    for row in table.itertuples():
        arm = [value(row.domain, row.variant, s) for s in SEEDS]
        base = [value(row.domain, "mix=base", s) for s in SEEDS]
        assert row.delta == pytest.approx(np.mean(arm) - np.mean(base))
        result = stats.ttest_rel(arm, base)  # paired: both arms ran seeds 0-3
        assert row.p == pytest.approx(result.pvalue) and row.method == "paired"
        raw.append(result.pvalue)
    # Holm over all six (domain, arm) comparisons at once, not per domain
    adjusted = multipletests(raw, 0.05, method="holm")[1]
    assert table["p_adj"].to_numpy() == pytest.approx(adjusted)
    for row in table.itertuples():
        arm = np.array([value(row.domain, row.variant, s) for s in SEEDS])
        d = arm - np.array([value(row.domain, "mix=base", s) for s in SEEDS])
        half = stats.t.ppf(1 - (1 - row.level) / 2, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        assert (row.low, row.high) == pytest.approx((d.mean() - half, d.mean() + half))


def test_signal_to_noise_per_metric_is_the_spread_of_means_over_the_seed_sd(store):
    runset = load_runs(store, ["mix"])
    snr = suite_signal_to_noise(runset)
    assert set(snr) == {
        "val/code/bpb",
        "val/prose/bpb",
        "val/wordnet/bpb",
        "val/bpb_macro",
        "val/bpb",
    }
    for domain in EFFECTS:
        groups = [np.array([value(domain, arm, s) for s in SEEDS]) for arm in ARMS]
        sd = np.sqrt(
            sum(((g - g.mean()) ** 2).sum() for g in groups) / sum(len(g) - 1 for g in groups)
        )
        means = [g.mean() for g in groups]
        assert snr[f"val/{domain}/bpb"] == pytest.approx(((max(means) - min(means)) / sd, sd))
    # The domain without an effect has the smallest signal-to-noise ratio.
    assert min(snr, key=lambda m: snr[m][0]) == "val/wordnet/bpb"


def test_compare_takes_a_suite_metric_and_prints_the_domains_and_their_snr(store, tmp_path, capsys):
    args = ["compare", "mix", "--tracking-uri", store, "--format", "table"]
    assert (
        main(
            [
                *args,
                "--metric",
                "val/bpb_macro",
                "--noise",
                "--report",
                "--report-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "val/bpb_macro" in out and "Per domain (data.eval_sets):" in out
    assert "Signal-to-noise of val/wordnet/bpb" in out
    assert (tmp_path / "domains.png").stat().st_size > 0
    assert main([*args, "--metric", "val/code/bpb"]) == 0


def test_domain_table_takes_the_comparisons_options(store):
    runset = load_runs(store, ["mix"])
    options = CompareOptions(baseline="mix=code", correction="none", paired="off")
    table = domain_table(runset, options)
    assert set(table["baseline"]) == {"mix=code"} and set(table["method"]) != {"paired"}
    assert (table["p_adj"] == table["p"]).all()


def small_store(root, suite: bool) -> str:
    """Two arms x 2 seeds; with `suite`, each run logs two eval sets besides val/bpb."""
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("pair", artifact_location=str(root / "artifacts"))
    parent = log_parent(client, exp, "pair", T0)
    start = T0 + 1000
    for arm, shift in (("mix=base", 0.0), ("mix=code", -0.02)):
        for seed in (0, 1):
            code, prose = 1.4 + shift + 0.01 * seed, 1.6 - shift / 2 + 0.013 * seed
            metrics = [Metric("val/bpb", prose, start, 10)]
            if suite:
                metrics += [
                    Metric("val/code/bpb", code, start, 10),
                    Metric("val/prose/bpb", prose, start, 10),
                    Metric("val/bpb_macro", (code + prose) / 2, start, 10),
                ]
            params = {"name": "pair", "data.sources.code.weight": arm, "seeds": "[0, 1]"}
            log_child(client, exp, parent, arm, seed, start, params=params, metrics=metrics)
            start += 1000
    return uri


def test_report_has_a_per_domain_section_when_the_runs_log_a_suite(tmp_path):
    uri = small_store(tmp_path, suite=True)
    out = tmp_path / "report"
    args = ["compare", "pair", "--tracking-uri", uri, "--format", "csv", "--report"]
    assert main([*args, "--report-dir", str(out)]) == 0
    table = domain_table(load_runs(uri, ["pair"]), CompareOptions())
    assert sorted(table["domain"]) == ["code", "prose"]
    md, html = (out / "report.md").read_text(), (out / "index.html").read_text()
    assert "## Per domain" in md and "<h2>Per domain</h2>" in html.replace(' id="per-domain"', "")
    lines = md.splitlines()
    for row in table.itertuples():
        cells = f"| {row.domain} | {row.variant} | {row.delta:+.4f} | [{row.low:+.4f}, "
        assert any(line.startswith(cells) for line in lines), cells
        assert f"<td>{row.domain}</td><td>{row.variant}</td><td>{row.delta:+.4f}</td>" in html
    assert "| val/code/bpb |" in md and "| val/bpb_macro |" in md  # the SNR per metric
    assert "![domains](domains.png)" in md and 'alt="domains" src="data:image/png;base64,' in html
    assert (out / "domains.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_without_a_suite_has_no_per_domain_section(tmp_path):
    uri = small_store(tmp_path, suite=False)
    out = tmp_path / "report"
    args = ["compare", "pair", "--tracking-uri", uri, "--report", "--report-dir", str(out)]
    assert main(args) == 0
    assert "Per domain" not in (out / "report.md").read_text()
    assert "Per domain" not in (out / "index.html").read_text()
    assert not (out / "domains.png").exists()
