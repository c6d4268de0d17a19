"""`compare.render`: the comparison as a plain or rich table, CSV, JSON and markdown."""

from __future__ import annotations

import io
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from norm_store import (
    FINAL_BPB,
    LN,
    RMS,
    run_cli,
)

from minimind.compare import (
    CompareOptions,
    compare,
    load_runs,
)


def test_plain_table_output(store, capsys) -> None:
    code, out, _ = run_cli(capsys, "norm", "--tracking-uri", store["uri"])
    assert code == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("model.norm  seeds"))
    assert lines[header + 2].startswith("rmsnorm ") and lines[header + 3].startswith("layernorm ")
    assert "2.0200 ± 0.0200" in lines[header + 2] and "2.1500 ± 0.0500" in lines[header + 3]
    assert "baseline" in lines[header + 3]
    assert "Failed or incomplete runs" in out and "loss is NaN" in out
    assert "\x1b[" not in out  # no terminal colour codes when not a terminal
    assert "; budget 10 steps;" in out


def test_csv_columns_are_metric_stat(store, capsys) -> None:
    code, out, _ = run_cli(capsys, "norm", "--tracking-uri", store["uri"], "--format", "csv")
    assert code == 0
    df = pd.read_csv(io.StringIO(out))
    for column in ("val/bpb_mean", "val/bpb_std", "val/bpb_n", "val/loss_mean", "val/bpb_best"):
        assert column in df.columns
    assert df.set_index("variant").loc[LN, "val/bpb_mean"] == pytest.approx(2.15)
    assert df["val/bpb_n"].tolist() == [3, 3]


def test_json_output(store, capsys) -> None:
    code, out, _ = run_cli(capsys, "norm", "--tracking-uri", store["uri"], "--format", "json")
    assert code == 0
    doc = json.loads(out)
    rows = {r["variant"]: r for r in doc["rows"]}
    assert rows[RMS]["val/bpb_mean"] == pytest.approx(2.02)
    assert rows[LN]["val/bpb_delta_low"] is None  # the baseline has no interval
    assert doc["baseline"] == LN and doc["metric"] == "val/bpb"
    assert {r["status"] for r in doc["failed_runs"]} == {"FAILED", "KILLED"}


def test_markdown_output(store, capsys) -> None:
    code, out, _ = run_cli(
        capsys, "norm", "--tracking-uri", store["uri"], "--format", "markdown", "--baseline", RMS
    )
    assert code == 0
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert table[0].startswith("| model.norm | seeds |") and set(table[1]) <= {"|", "-"}
    assert len(table) == 4 + 4  # header, rule, 2 variants; header, rule, 2 failed runs
    ln_row = next(line for line in table if line.startswith("| layernorm |"))
    assert "+0.1300" in ln_row and "worse" in ln_row


def test_rich_table_is_never_squeezed(norm, capsys, monkeypatch) -> None:
    from minimind.compare.render import print_rich

    monkeypatch.setenv("COLUMNS", "80")
    print_rich(norm)
    out = capsys.readouterr().out
    assert "…" not in out and "-0.1300 [-0.2383, -0.0217]" in out and "loss is NaN" in out


def test_corrected_family_in_json_csv_and_caption(store, capsys) -> None:
    """Four variants against layernorm over the norm and mlp experiments: the old invocation's
    single run has no interval, so the family has three comparisons."""
    from statsmodels.stats.multitest import multipletests

    argv = ["norm", "--experiments", "mlp", "--all", "--baseline", LN, "--paired", "off"]
    code, out, _ = run_cli(capsys, *argv, "--tracking-uri", store["uri"], "--format", "json")
    assert code == 0
    rows = {r["variant"]: r for r in json.loads(out)["rows"]}
    tested = [v for v, r in rows.items() if r["val/bpb_p"] is not None]
    assert sorted(tested) == sorted([RMS, "model.mlp=swiglu", "model.mlp=moe"])
    expected = multipletests([rows[v]["val/bpb_p"] for v in tested], method="holm")[1]
    assert [rows[v]["val/bpb_p_adj"] for v in tested] == pytest.approx(expected)
    assert [rows[v]["val/bpb_delta_level"] for v in tested] == pytest.approx([1 - 0.05 / 3] * 3)
    code, out, _ = run_cli(
        capsys,
        *argv,
        "--correction",
        "bonferroni",
        "--tracking-uri",
        store["uri"],
        "--format",
        "csv",
    )
    df = pd.read_csv(io.StringIO(out)).set_index("variant")
    assert df.loc[RMS, "val/bpb_p_adj"] == pytest.approx(min(1.0, 3 * df.loc[RMS, "val/bpb_p"]))
    code, out, _ = run_cli(capsys, *argv, "--tracking-uri", store["uri"])
    assert "Holm-corrected for 3 comparisons" in out and "[98.33% CI]" in out
    # swiglu ran layernorm's curves: no difference, and the verdict says what could be seen.
    mde = rows["model.mlp=swiglu"]["val/bpb_mde"]
    assert re.search(rf"swiglu .* within noise \(MDE {mde:.2g}\)", out)


def test_noise_and_power_in_table_and_json(store, capsys) -> None:
    from minimind.stats.power import seeds_for_difference

    argv = ["norm", "--tracking-uri", store["uri"], "--noise", "--power", "0.05"]
    code, out, _ = run_cli(capsys, *argv)
    sd = math.sqrt((0.05**2 * 2 + 0.02**2 * 2) / 4)  # pooled over layernorm and rmsnorm, 4 df
    assert code == 0 and f"Seed-to-seed sd of val/bpb: {sd:.3g} (95% CI" in out
    spread = abs(np.mean(FINAL_BPB[RMS]) - np.mean(FINAL_BPB[LN]))
    assert f"Signal-to-noise of val/bpb: {spread / sd:.3g} (" in out
    assert "Sd of the per-seed differences" in out
    unpaired = seeds_for_difference(0.05, sd, design="unpaired")
    assert f"needs seeds per arm: {unpaired} unpaired, " in out
    code, out, _ = run_cli(capsys, *argv, "--format", "json")
    doc = json.loads(out)
    assert doc["noise"]["sd"] == pytest.approx(sd) and doc["noise"]["df"] == 4
    d = np.subtract(FINAL_BPB[RMS], FINAL_BPB[LN])
    assert doc["paired_noise"]["sd"] == pytest.approx(np.std(d, ddof=1))
    assert doc["power"]["seeds_per_arm"] == {
        "unpaired": unpaired,
        "paired": seeds_for_difference(0.05, np.std(d, ddof=1)),
    }


def test_untested_rows_have_null_verdicts_in_csv_and_json(store, capsys) -> None:
    """The baseline was not tested: its within_noise is empty (null), not true; a paired row
    shows its pair count."""
    argv = ["norm", "--tracking-uri", store["uri"]]
    _, out, _ = run_cli(capsys, *argv, "--format", "csv")
    rows = pd.read_csv(io.StringIO(out)).set_index("variant")
    assert pd.isna(rows.loc[LN, "val/bpb_within_noise"]) and pd.isna(rows.loc[LN, "compute_x"])
    assert rows.loc[RMS, "val/bpb_pairs"] == 3
    _, out, _ = run_cli(capsys, *argv, "--format", "json")
    by_variant = {r["variant"]: r for r in json.loads(out)["rows"]}
    assert by_variant[LN]["val/bpb_within_noise"] is None
    assert by_variant[RMS]["val/bpb_within_noise"] is False
    _, out, _ = run_cli(capsys, *argv)
    assert "(3 pairs)" in out


def test_untested_and_mixed_rows_get_no_verdict_and_no_bound() -> None:
    """An infinite value has no t-test: no better/worse; seeds beyond and before the
    reference's curve give no '≥' multiplier."""
    from minimind.compare import render

    row = pd.Series(
        {
            "is_baseline": False,
            "val/bpb_delta_method": "welch",
            "val/bpb_delta": -np.inf,
            "val/bpb_within_noise": None,
            "compute_x": np.nan,
            "compute_x_bound": np.nan,
            "compute_x_where": "mixed",
            "compute_x_low": np.nan,
            "compute_x_high": np.nan,
        }
    )
    assert render.verdict(row, "val/bpb", maximize=False) == "n/a (no test)"
    assert render.fmt_multiplier(row) == "n/a (bounds both ways)"
    beyond = row.copy()
    beyond["compute_x_where"], beyond["compute_x_bound"] = "beyond", 1.0
    assert render.fmt_multiplier(beyond) == "≥ 1×"


def test_the_power_line_names_the_family_it_corrects_for(store) -> None:
    """Three groups, one comparison (rmsnorm against layernorm): the power line's alpha and its
    count of comparisons are both those of the one comparison."""
    from minimind.compare import render

    runset = load_runs(store["uri"], ["norm"], all_runs=True)
    c = compare(runset, CompareOptions(power_delta=0.05, references={RMS: LN}))
    assert len(c.table) == 3 and c.power_comparisons == 1 and c.power_alpha == pytest.approx(0.05)
    assert "(holm over 1 comparison(s))" in "\n".join(render.noise_lines(c))


def test_the_caption_names_the_baseline_once_where_its_label_says_baseline(store) -> None:
    from minimind.compare import render

    c = compare(load_runs(store["uri"], ["norm"], all_runs=True), CompareOptions())
    assert f"; Δ vs baseline {c.baseline} (" in render.caption(c)
    c.baseline = "baseline S"  # a study's arm label
    assert "; Δ vs baseline S (" in render.caption(c)
