"""`minimind compare` on a synthetic MLflow store written with the tags of `minimind.record`.

The values are chosen so that every aggregate can be computed by hand (see `EXPECTED`).
"""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric
from scipy import stats

from minimind.cli import main
from minimind.compare import CompareError, compare, load_runs, print_comparison

T0 = 1_700_000_000_000  # ms; start times are spaced by a second so that run order is known

LN = "model.norm=layernorm"
RMS = "model.norm=rmsnorm"
# Final val/bpb and val/loss per seed (0, 1, 2).
FINAL_BPB = {LN: [2.10, 2.20, 2.15], RMS: [2.00, 2.02, 2.04]}
FINAL_LOSS = {LN: [1.40, 1.50, 1.45], RMS: [1.30, 1.32, 1.34]}
# val/bpb at the mid-training eval (step 5); layernorm seed 0 is better there than at the end.
MID_BPB = {LN: [2.05, 2.60, 2.60], RMS: [2.50, 2.50, 2.50]}
THROUGHPUT = {LN: [100.0, 200.0, 300.0, 1000.0], RMS: [500.0, 600.0, 700.0]}  # + 10·seed
EXPECTED = {
    LN: {
        "n": 3,
        "val/bpb_mean": 2.15,
        "val/bpb_std": 0.05,
        "val/loss_mean": 1.45,
        "val/loss_std": 0.05,
        "val/bpb_best": 2.05,
        "perf/tokens_per_s_median": 260.0,  # per-seed medians 250, 260, 270
        "sys/peak_mem_mb_max": 102.0,
        "wall_s_mean": 31.0,
        "perf/mfu_median": 0.02,
    },
    RMS: {
        "n": 3,
        "val/bpb_mean": 2.02,
        "val/bpb_std": 0.02,
        "val/loss_mean": 1.32,
        "val/loss_std": 0.02,
        "val/bpb_best": 2.00,
        "perf/tokens_per_s_median": 610.0,  # per-seed medians 600, 610, 620
        "sys/peak_mem_mb_max": 102.0,
        "wall_s_mean": 31.0,
        "perf/mfu_median": 0.02,
    },
}
STEPS = 10


def _curves(variant: str, seed: int, start: int) -> list[Metric]:
    """Histories as the runner logs them: train metrics every step, evals at steps 5 and 10."""
    ts = lambda step: start + 1000 * step  # noqa: E731
    out = []
    for step in range(1, STEPS + 1):
        out += [
            Metric("train/loss", 3.0 - 0.1 * step + 0.01 * seed, ts(step), step),
            Metric("train/tokens", 1024.0 * step, ts(step), step),
            Metric("time/elapsed_s", (30.0 + seed) * step / STEPS, ts(step), step),
            Metric("opt/lr", 1e-3, ts(step), step),
        ]
    for i, value in enumerate(THROUGHPUT[variant]):
        out.append(Metric("perf/tokens_per_s", value + 10 * seed, ts(i + 1), i + 1))
    out += [Metric("perf/mfu", v, ts(i + 1), i + 1) for i, v in enumerate([0.01, 0.02, 0.03])]
    out += [Metric("sys/peak_mem_mb", 90.0 + seed, ts(1), 1)]
    out += [Metric("sys/peak_mem_mb", 100.0 + seed, ts(STEPS), STEPS)]
    out += [
        Metric("val/bpb", MID_BPB[variant][seed], ts(5), 5),
        Metric("val/bpb", FINAL_BPB[variant][seed], ts(STEPS), STEPS),
        Metric("val/loss", FINAL_LOSS[variant][seed] + 0.3, ts(5), 5),
        Metric("val/loss", FINAL_LOSS[variant][seed], ts(STEPS), STEPS),
    ]
    return out


def _params(variant: str, seed: int) -> dict[str, str]:
    return {
        "name": "norm",
        "model.norm": variant.split("=")[1],
        "model.dim": "64",
        "train.steps": str(STEPS),
        "train.device": "cpu",
        "num_params": "123456",
        "num_active_params": "123456",
        "flops_per_token": "740736",
        "seeds": "[0, 1, 2]",
    }


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
        params=_params(LN, 0), metrics=_curves(LN, 0, T0 + 1000),
    )  # fmt: skip
    parent = log_parent(client, norm, "norm", T0 + 100_000)
    start = T0 + 101_000
    for variant in (LN, RMS):
        for seed in range(3):
            log_child(
                client, norm, parent, variant, seed, start,
                params=_params(variant, seed), metrics=_curves(variant, seed, start),
                tags={"component.norm": variant.split("=")[1]},
            )  # fmt: skip
            start += 1000
    log_child(
        client, norm, parent, RMS, 3, start, params=_params(RMS, 3),
        metrics=[Metric("train/loss", 9.0, start, 1)], status="FAILED",
        tags={"failure_reason": "FloatingPointError: loss is NaN at step 2", "component.norm": "rmsnorm"},
    )  # fmt: skip
    log_child(
        client, norm, parent, LN, 3, start + 1000, params=_params(LN, 3), metrics=[],
        status="KILLED",
        tags={"failure_reason": "KeyboardInterrupt (SIGINT)", "component.norm": "layernorm"},
    )  # fmt: skip
    mlp = client.create_experiment("mlp", artifact_location=str(root / "artifacts" / "mlp"))
    mlp_parent = log_parent(client, mlp, "mlp", T0 + 200_000)
    start = T0 + 201_000
    for variant, kind in (("model.mlp=swiglu", "swiglu"), ("model.mlp=moe", "moe")):
        for seed in range(2):
            curves = _curves(LN, seed, start)
            if kind == "moe":
                curves += [Metric("moe/load_cv", 1.0 / s, start + s, s) for s in range(1, 11)]
            log_child(
                client, mlp, mlp_parent, variant, seed, start,
                params={**_params(LN, seed), "model.mlp": kind}, metrics=curves,
                tags={"component.mlp": kind},
            )  # fmt: skip
            start += 1000
    client.create_experiment("empty", artifact_location=str(root / "artifacts" / "empty"))
    return {"uri": uri, "root": root, "parent": parent, "old_parent": old, "mlp_parent": mlp_parent}


@pytest.fixture(scope="module")
def norm(store: dict):
    return compare(load_runs(store["uri"], ["norm"]))


def _row(comparison, variant: str) -> pd.Series:
    table = comparison.table
    return table[table["variant"] == variant].iloc[0]


def test_default_selection_is_the_latest_invocation(norm, store) -> None:
    assert store["parent"] in norm.runset.selection
    assert set(norm.runs["group"]) == {LN, RMS}
    assert len(norm.runs) == 8  # 6 finished + failed + killed; the old invocation is left out


@pytest.mark.parametrize("variant", [LN, RMS])
def test_aggregates_match_hand_computed_values(norm, variant: str) -> None:
    row = _row(norm, variant)
    for column, expected in EXPECTED[variant].items():
        assert row[column] == pytest.approx(expected, rel=1e-9), column
    assert row["num_params"] == 123456 and row["flops_per_token"] == 740736
    assert row["n_failed"] == 1
    # independently: numpy's sample std
    assert row["val/bpb_std"] == pytest.approx(np.std(FINAL_BPB[variant], ddof=1))


def test_sorted_by_objective_and_default_baseline_is_first_variant(norm) -> None:
    assert list(norm.table["variant"]) == [RMS, LN]  # rmsnorm has the lower val/bpb
    assert norm.baseline == LN  # the first variant that ran
    base = _row(norm, LN)
    assert bool(base["is_baseline"]) and base["val/bpb_delta_method"] == "baseline"
    rms = _row(norm, RMS)
    assert rms["val/bpb_delta"] == pytest.approx(2.02 - 2.15)
    assert rms["val/bpb_delta_method"] == "paired"  # both ran seeds 0, 1, 2
    assert rms["val/bpb_delta_low"] <= rms["val/bpb_delta"] <= rms["val/bpb_delta_high"]


def test_paired_interval_matches_hand_computation(norm) -> None:
    rms = _row(norm, RMS)
    d = np.subtract(FINAL_BPB[RMS], FINAL_BPB[LN])  # seed by seed: -0.10, -0.18, -0.11
    half = stats.t.ppf(0.975, 2) * np.std(d, ddof=1) / math.sqrt(3)
    assert rms["val/bpb_delta_low"] == pytest.approx(-0.13 - half)
    assert rms["val/bpb_delta_high"] == pytest.approx(-0.13 + half)
    assert rms["val/bpb_p"] == pytest.approx(stats.ttest_rel(FINAL_BPB[RMS], FINAL_BPB[LN]).pvalue)
    assert rms["val/bpb_p_adj"] == rms["val/bpb_p"]  # one comparison: nothing to correct
    assert rms["val/bpb_delta_level"] == 0.95 and norm.n_comparisons == 1


def test_welch_interval_matches_hand_computation(store) -> None:
    rms = _row(compare(load_runs(store["uri"], ["norm"]), paired="off"), RMS)
    # stds 0.02 (rmsnorm) and 0.05 (layernorm), 3 seeds each
    vx, vy = 0.02**2 / 3, 0.05**2 / 3
    df = (vx + vy) ** 2 / (vx**2 / 2 + vy**2 / 2)
    assert df == pytest.approx(2.6240, abs=1e-4)
    t = stats.t.ppf(0.975, df)
    assert 3.1824 < t < 4.3027  # between t(0.975, 3) and t(0.975, 2)
    assert rms["val/bpb_delta_low"] == pytest.approx(-0.13 - t * math.sqrt(vx + vy))
    assert rms["val/bpb_delta_high"] == pytest.approx(-0.13 + t * math.sqrt(vx + vy))
    assert rms["val/bpb_delta_high"] == pytest.approx(-0.0225, abs=1e-4)
    assert not rms["val/bpb_within_noise"]  # the interval stays below zero


def test_bootstrap_on_request(store) -> None:
    rms = _row(compare(load_runs(store["uri"], ["norm"]), ci="bootstrap"), RMS)
    assert rms["val/bpb_delta_method"] == "bootstrap"  # bootstrap resamples each side alone
    # never narrower than Welch's interval, and its verdict is Welch's corrected test
    welch = stats.ttest_ind(FINAL_BPB[RMS], FINAL_BPB[LN], equal_var=False)
    interval = welch.confidence_interval(0.95)
    assert rms["val/bpb_delta_low"] <= interval.low and rms["val/bpb_delta_high"] >= interval.high
    assert rms["val/bpb_p"] == pytest.approx(welch.pvalue)


def test_failed_and_killed_runs_are_listed_with_reason(norm) -> None:
    problems = norm.problems.set_index("run_name")
    assert problems.loc[f"{RMS}/seed3", "status"] == "FAILED"
    assert "loss is NaN" in problems.loc[f"{RMS}/seed3", "reason"]
    assert problems.loc[f"{LN}/seed3", "status"] == "KILLED"
    assert "KeyboardInterrupt" in problems.loc[f"{LN}/seed3", "reason"]


def test_all_runs_and_group_by_param(store) -> None:
    c = compare(load_runs(store["uri"], ["norm"], all_runs=True), by="model.norm")
    assert c.by == "model.norm"
    ln = _row(c, "layernorm")
    assert ln["n"] == 4  # the old invocation's run has model.norm=layernorm too
    # ... of seed 0, as one of this invocation's: a seed's reruns are one observation
    assert ln["n_seeds"] == 3 and ln["val/bpb_n"] == 3
    assert ln["val/bpb_mean"] == pytest.approx(np.mean([2.10, 2.20, 2.15]))
    assert ln["val/bpb_std"] == pytest.approx(np.std([2.10, 2.20, 2.15], ddof=1))


def test_filter_across_experiments(store) -> None:
    runset = load_runs(store["uri"], ["norm", "mlp"], filter_string="tags.`component.mlp` = 'moe'")
    c = compare(runset)
    assert list(c.table["variant"]) == ["model.mlp=moe"] and c.table["n"].iloc[0] == 2
    moe_run = runset.runs["run_id"].iloc[0]
    assert runset.history(moe_run, "moe/load_cv").tolist() == [1.0 / s for s in range(1, 11)]


def test_other_objective_sorts_by_it(store) -> None:
    c = compare(load_runs(store["uri"], ["norm"]), metric="perf/tokens_per_s")
    assert list(c.table["variant"]) == [RMS, LN]  # larger throughput first
    assert c.maximize


def test_runs_are_grouped_by_their_tags_never_by_their_names(mlflow_uri) -> None:
    """Names that break the `<variant>/seed<k>` pattern group by their `variant` and `seed`
    tags; a run without them is a variant of its own, named by its run name, with no seed."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("named")
    parent = log_parent(client, exp, "named", T0)
    for seed, name in ((0, "first attempt"), (1, "norm=rmsnorm/seed9")):
        log_child(
            client, exp, parent, "norm=rmsnorm", seed, T0 + 1000 * (seed + 1),
            params=_params(RMS, seed), metrics=_curves(RMS, seed, T0), run_name=name,
        )  # fmt: skip
    untagged = client.create_run(
        exp,
        start_time=T0 + 3000,
        run_name="norm=layernorm/seed2",
        tags={"mlflow.parentRunId": parent, "minimind.role": "child"},
    ).info.run_id
    client.log_batch(untagged, metrics=_curves(LN, 2, T0))
    client.set_terminated(untagged, "FINISHED", end_time=T0 + 40_000)

    runs = load_runs(mlflow_uri, ["named"]).runs.set_index("run_name")
    assert runs.loc["first attempt", "variant"] == "norm=rmsnorm"
    assert runs.loc["norm=rmsnorm/seed9", "seed"] == 1  # the tag, not the name's 9
    assert runs.loc["norm=layernorm/seed2", "variant"] == "norm=layernorm/seed2"
    assert np.isnan(runs.loc["norm=layernorm/seed2", "seed"])
    c = compare(load_runs(mlflow_uri, ["named"]))
    assert _row(c, "norm=rmsnorm")["n"] == 2 and _row(c, "norm=layernorm/seed2")["n"] == 1


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
            params=_params(RMS, seed), metrics=_curves(RMS, seed, T0),
        )  # fmt: skip

    def untouchable(*_: object) -> None:
        raise AssertionError("MLflow's global tracking URI was used")

    monkeypatch.setattr(mlflow, "set_tracking_uri", untouchable)
    monkeypatch.setattr(mlflow, "get_tracking_uri", untouchable)
    runset = load_runs(mlflow_uri, ["own"])
    assert sorted(runset.runs["seed"]) == [0, 1]
    assert list(runset.parents["run_id"]) == [parent]
    assert runset.runs["tags.variant"].tolist() == ["norm=rmsnorm"] * 2


def test_the_report_header_shows_the_recorded_device(mlflow_uri) -> None:
    from minimind.compare.report import header_fields

    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("devices")
    parent = log_parent(client, exp, "devices", T0)
    devices = {"cpu": {"device": "cpu", "precision": "fp32"}}
    devices["gpu"] = {"device": "cuda", "gpu_name": "NVIDIA H100", "precision": "bf16"}
    for seed, (variant, tags) in enumerate(devices.items()):
        log_child(
            client, exp, parent, variant, seed, T0 + 1000 * (seed + 1),
            params=_params(RMS, seed), metrics=_curves(RMS, seed, T0), tags=tags,
        )  # fmt: skip
    fields = header_fields(compare(load_runs(mlflow_uri, ["devices"])))
    assert fields["device"] == "cpu, cuda (NVIDIA H100)"
    assert fields["precision"] == "bf16, fp32"


def test_runs_without_device_tags_say_unknown_rather_than_the_spec_s_auto(norm) -> None:
    from minimind.compare.report import header_fields

    fields = header_fields(norm)  # the synthetic runs log train.device as a param only
    assert fields["device"] == fields["precision"] == "unknown"


# --- the command line -----------------------------------------------------------------------


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["compare", *argv])
    out, err = capsys.readouterr()
    return code, out, err


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


def test_by_tag_and_all_in_cli(store, capsys) -> None:
    code, out, _ = run_cli(
        capsys, "norm", "--all", "--by", "component.norm", "--tracking-uri", store["uri"]
    )
    assert code == 0 and re.search(r"^rmsnorm\s+3 \(\+1 failed\)", out, re.M)


def test_no_experiment_means_the_latest_invocation_anywhere(store, capsys) -> None:
    code, out, _ = run_cli(capsys, "--tracking-uri", store["uri"], "--format", "csv")
    assert code == 0  # the mlp invocation started last
    assert sorted(pd.read_csv(io.StringIO(out))["variant"]) == ["model.mlp=moe", "model.mlp=swiglu"]


def test_rich_table_is_never_squeezed(norm, capsys, monkeypatch) -> None:
    from minimind.compare.render import print_rich

    monkeypatch.setenv("COLUMNS", "80")
    print_rich(norm)
    out = capsys.readouterr().out
    assert "…" not in out and "-0.1300 [-0.2383, -0.0217]" in out and "loss is NaN" in out


def test_filter_in_cli(store, capsys) -> None:
    code, out, _ = run_cli(
        capsys,
        "--filter",
        "tags.`component.mlp` = 'moe'",
        "--experiments",
        "norm,mlp",
        "--tracking-uri",
        store["uri"],
        "--format",
        "csv",
    )
    assert code == 0
    assert pd.read_csv(io.StringIO(out))["variant"].tolist() == ["model.mlp=moe"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nosuch"], r"unknown experiment nosuch; experiments: Default, empty, mlp, norm"),
        (["norm", "--by", "nosuch"], r"unknown --by key 'nosuch'; params: .*model\.norm.*tags: .*variant"),
        (["norm", "--baseline", "nosuch"], r"unknown --baseline 'nosuch'; variants: model\.norm="),
        (["norm", "--metric", "val/nosuch"], r"unknown --metric 'val/nosuch'; logged metrics: .*val/bpb"),
        (["norm", "--filter", "this is not a filter"], r"invalid --filter"),
        (["norm", "--power", "0"], r"--power: must be a difference > 0"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2(store, capsys, argv: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, *argv, "--tracking-uri", store["uri"])
    assert code == 2 and out == ""
    assert re.search(message, err), err


def test_missing_store_is_a_usage_error(tmp_path, capsys) -> None:
    code, _, err = run_cli(capsys, "norm", "--tracking-uri", f"sqlite:///{tmp_path}/none.db")
    assert code == 2 and "no MLflow store" in err
    assert not (tmp_path / "none.db").exists()


def test_bad_format_is_an_argparse_error(store, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["compare", "norm", "--format", "xml"])
    assert e.value.code == 2


def test_empty_experiment(store, capsys) -> None:
    code, out, err = run_cli(capsys, "empty", "--tracking-uri", store["uri"])
    assert code == 1 and out == ""
    assert "no runs" in err and "empty" in err


def test_print_comparison_for_one_invocation(store, capsys) -> None:
    print_comparison(store["uri"], "norm", parent_run_id=store["old_parent"])
    out = capsys.readouterr().out
    assert "model.norm=oldvariant" in out and RMS not in out
    print_comparison(store["uri"], "nosuch")
    assert "unknown experiment" in capsys.readouterr().err


def test_compare_error_carries_exit_code() -> None:
    assert CompareError("x").exit_code == 2 and CompareError("x", 1).exit_code == 1


# --- the report -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report(store, tmp_path_factory) -> Path:
    from minimind.compare.report import write_report

    folder = tmp_path_factory.mktemp("report") / "norm"
    runset = load_runs(store["uri"], ["mlp", "norm"], all_runs=True)
    return write_report(compare(runset, baseline=LN), folder)


FIGURES = ["curves_train_loss", "curves_val_bpb", "final", "pareto", "moe_load"]


def test_report_files(report: Path) -> None:
    folder = report.parent
    for name in ["index.html", "report.md", "runs.csv", "comparison.csv"]:
        assert (folder / name).stat().st_size > 0, name
    for name in FIGURES:
        assert (folder / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    runs = pd.read_csv(folder / "runs.csv")
    assert len(runs) == 9 + 4 and set(runs["status"]) == {"FINISHED", "FAILED", "KILLED"}
    assert "val/bpb_mean" in pd.read_csv(folder / "comparison.csv").columns
    md = (folder / "report.md").read_text()
    assert all(f"]({name}.png)" in md for name in FIGURES)
    assert "| layernorm |" not in md  # the variants of two experiments share no key prefix


def test_index_html_inlines_every_figure(report: Path) -> None:
    import base64

    page = report.read_text()
    inlined = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)
    assert [name for name, _ in inlined] == FIGURES
    for name, data in inlined:
        assert base64.b64decode(data) == (report.parent / f"{name}.png").read_bytes()
    assert not re.search(r'(src|href)="(?!data:)', page)  # self-contained: nothing to fetch
    for field in ("spec hash", "abc123def456", "git commit", "device", "dates"):
        assert field in page


def test_report_rows_are_styled_by_their_verdict_kind(report: Path) -> None:
    """The class of a row comes from what its verdict is, not from parsing its text."""
    scored = re.search(r'<table class="comparison">(.*?)</table>', report.read_text(), re.S)
    rows = re.findall(r'<tr class="([a-z-]+)"><td>([^<]+)</td>', scored.group(1))
    assert rows == [
        ("within-noise", RMS),
        ("untested", "model.norm=oldvariant"),
        ("baseline", LN),
        ("within-noise", "model.mlp=swiglu"),
        ("within-noise", "model.mlp=moe"),
    ]
    cost = re.search(r'<table class="comparison cost">(.*?)</table>', report.read_text(), re.S)
    assert "compute ×" in cost.group(1) and "verdict" not in cost.group(1)


def test_report_is_logged_to_the_parent_run(store, tmp_path) -> None:
    from minimind.compare.report import ARTIFACT_PATH, write_report

    write_report(compare(load_runs(store["uri"], ["mlp"])), tmp_path / "mlp")
    client = MlflowClient(store["uri"])
    logged = {Path(f.path).name for f in client.list_artifacts(store["mlp_parent"], ARTIFACT_PATH)}
    assert {"index.html", "report.md", "runs.csv", "final.png"} <= logged


def test_report_from_cli(store, tmp_path, capsys) -> None:
    code, out, err = run_cli(
        capsys, "norm", "--tracking-uri", store["uri"], "--report", "--report-dir", str(tmp_path)
    )
    assert code == 0 and "rmsnorm" in out
    assert f"{tmp_path}/index.html" in err and (tmp_path / "index.html").exists()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
]
# Appended to a copy of the page: records, once loaded, how many images decoded.
IMAGE_PROBE = """<script>window.addEventListener("load", () => {
  const imgs = [...document.images];
  document.body.dataset.images = imgs.length;
  document.body.dataset.decoded = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  const tables = [...document.querySelectorAll("table.comparison")];
  document.body.dataset.tableWidths = tables.map(t => t.scrollWidth).join(",");
  document.body.dataset.viewport = document.documentElement.clientWidth;
  document.body.dataset.pageWidth = document.documentElement.scrollWidth;
});</script>"""


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    return subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_in_a_headless_browser(report: Path, tmp_path: Path) -> None:
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", IMAGE_PROBE + "</body>"))
    dump = _chromium(
        tmp_path,
        "--virtual-time-budget=10000",
        "--window-size=1400,900",
        "--dump-dom",
        probe.as_uri(),
    )
    assert dump.returncode == 0, dump.stderr[-2000:]
    assert _console_messages(dump.stderr) == []
    images = int(re.search(r'data-images="(\d+)"', dump.stdout).group(1))
    decoded = int(re.search(r'data-decoded="(\d+)"', dump.stdout).group(1))
    assert images == decoded == len(FIGURES)
    bodies = re.findall(
        r'<table class="comparison[^"]*">.*?<tbody>(.*?)</tbody>', dump.stdout, re.S
    )
    # layernorm, rmsnorm, oldvariant, swiglu, moe: in each table
    assert [body.count("<tr") for body in bodies] == [5] * len(bodies) and bodies
    # Every column is in view at 1,400 px: no table, and not the page, scrolls sideways.
    viewport = int(re.search(r'data-viewport="(\d+)"', dump.stdout).group(1))
    widths = re.search(r'data-table-widths="([\d,]+)"', dump.stdout).group(1).split(",")
    page_width = int(re.search(r'data-page-width="(\d+)"', dump.stdout).group(1))
    assert viewport <= 1400 and page_width <= viewport, (viewport, page_width)
    assert max(int(w) for w in widths) <= viewport, (widths, viewport)
    screenshot = tmp_path / "report.png"
    shot = _chromium(
        tmp_path, f"--screenshot={screenshot}", "--window-size=1400,3000", report.as_uri()
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert _console_messages(shot.stderr) == []
    png = screenshot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(png[16:20], "big") == 1400 and int.from_bytes(png[20:24], "big") == 3000
    print(f"report screenshot: {screenshot}")


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


def test_compute_multiplier_reads_each_seed_off_the_baseline_run_of_that_seed(mlflow_uri) -> None:
    """Baseline seed 0 runs 5 - 0.01·step, seed 1 is 0.2 higher throughout; each variant seed
    ends 0.5 below its own baseline seed's value at step 100, which that seed's curve reaches
    at step 150: 1.5× for both seeds. The mean baseline curve would give 1.6× and 1.4×."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("paired_compute")
    parent = log_parent(client, exp, "paired_compute", T0)
    start = T0 + 1000
    for variant in ("a", "b"):
        for seed, offset in ((0, 0.0), (1, 0.2)):
            steps = list(range(10, 210 if variant == "a" else 110, 10))
            values = [5 + offset - 0.01 * s for s in steps]
            if variant == "b":
                values[-1] = 5 + offset - 0.01 * 150
            metrics = [
                Metric("val/bpb", v, start + s, s) for s, v in zip(steps, values, strict=True)
            ]
            log_child(client, exp, parent, variant, seed, start, params={}, metrics=metrics)
            start += 1000
    row = _row(compare(load_runs(mlflow_uri, ["paired_compute"])), "b")
    assert row["compute_x"] == pytest.approx(1.5, rel=1e-6)
    assert math.isnan(row["compute_x_low"])  # no spread between the paired seeds


def test_compute_multiplier_reads_the_exact_final_value(mlflow_uri) -> None:
    """Runs log the periodic estimate val/bpb_sampled and the exact val/bpb once at the end: the
    variant's exact final 3.5 is where the baseline's curve (5 - 0.01·step) is at step 150, 1.5×
    its 100 steps; its last estimate, 4.0, would read 1.0×."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("exact_final")
    parent = log_parent(client, exp, "exact_final", T0)
    start = T0 + 1000
    for variant, last in (("a", 200), ("b", 100)):
        for seed in (0, 1):
            steps = range(10, last + 10, 10)
            metrics = [Metric("val/bpb_sampled", 5 - 0.01 * s, start + s, s) for s in steps]
            exact = 5 - 0.01 * (150 if variant == "b" else last)
            metrics.append(Metric("val/bpb", exact, start + last, last))
            log_child(client, exp, parent, variant, seed, start, params={}, metrics=metrics)
            start += 1000
    row = _row(compare(load_runs(mlflow_uri, ["exact_final"])), "b")
    assert row["compute_x_where"] == "inside"
    assert row["compute_x"] == pytest.approx(1.5, rel=1e-6)


def test_compute_multiplier_in_flops_from_the_baseline_curve(mlflow_uri, capsys) -> None:
    """Baseline val/bpb 5 - 0.01·step over 200 steps; the variant ends at step 100 where the
    baseline is at step 150 (seed 0) and 130 (seed 1), with half the FLOPs per token: 3.0×
    and 2.6× compute."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("compute")
    parent = log_parent(client, exp, "compute", T0)
    size = {"train.batch_size": "4", "train.seq_len": "32", "train.grad_accum": "1"}
    start = T0 + 1000
    for variant, flops, reached in (("a", 1000, None), ("b", 500, [150, 130])):
        for seed in (0, 1):
            steps = list(range(10, 210 if reached is None else 110, 10))
            values = [5 - 0.01 * s for s in steps]
            if reached:
                values[-1] = 5 - 0.01 * reached[seed]
            metrics = [
                Metric("val/bpb", v, start + s, s) for s, v in zip(steps, values, strict=True)
            ]
            params = {**size, "flops_per_token": str(flops), "match.by": "flops"}
            params["match.knob"] = "model.dim"
            log_child(client, exp, parent, variant, seed, start, params=params, metrics=metrics)
            start += 1000
    c = compare(load_runs(mlflow_uri, ["compute"]))
    row = _row(c, "b")
    logs = np.log([2 * 150 / 100, 2 * 130 / 100])
    half = stats.t.ppf(0.975, 1) * logs.std(ddof=1) / math.sqrt(2)
    assert c.compute_unit == "FLOPs" and row["compute_x_where"] == "inside"
    assert row["compute_x"] == pytest.approx(math.exp(logs.mean()), rel=1e-6)
    assert row["compute_x_low"] == pytest.approx(math.exp(logs.mean() - half), rel=1e-6)
    code, out, _ = run_cli(capsys, "compute", "--tracking-uri", mlflow_uri)
    assert code == 0 and f"{math.exp(logs.mean()):.3g}× [" in out and "baseline's FLOPs" in out
    assert "variants matched on flops by resizing model.dim" in out


def test_all_pools_only_runs_whose_configs_differ_in_the_seed(mlflow_uri, capsys) -> None:
    """Three invocations of variant x: seeds 0, 1 and then seed 2 (another spec hash, the same
    config) pool into one row; a third with another model.dim is a row of its own, and a
    rerun of seed 0 is counted as a run, not as a new seed."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("pooling")
    start = T0
    for spec_hash, dim, seeds in (
        ("aaaa1111", "64", [0, 1]),
        ("bbbb2222", "64", [2, 0]),
        ("cccc3333", "128", [0, 1]),
    ):
        parent = log_parent(client, exp, "pooling", start)
        for seed in seeds:
            start += 1000
            params = {**_params(LN, seed), "model.dim": dim, "seeds": str(seeds)}
            log_child(
                client, exp, parent, "x", seed, start, params=params,
                metrics=_curves(LN, seed, start), tags={"spec_hash": spec_hash},
            )  # fmt: skip
    c = compare(load_runs(mlflow_uri, ["pooling"], all_runs=True))
    rows = c.table.set_index("variant")
    assert sorted(rows.index) == ["x @aaaa1111", "x @cccc3333"]
    assert rows.loc["x @aaaa1111", "n"] == 4 and rows.loc["x @aaaa1111", "n_seeds"] == 3
    assert rows.loc["x @cccc3333", "n"] == 2
    code, out, _ = run_cli(capsys, "pooling", "--all", "--tracking-uri", mlflow_uri)
    assert code == 0 and re.search(r"^x @aaaa1111\s+4 \(3 distinct\)", out, re.M)


def test_running_runs_are_shown_as_running_and_the_finished_ones_compared(
    mlflow_uri, capsys
) -> None:
    """An invocation still training (or SIGKILLed): its parent and its first child are RUNNING,
    with no end time. It is listed as RUNNING; once a sibling has finished, that one is compared."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("training")
    tags = {"minimind.role": "parent", "spec_hash": "abc123def456"}
    parent = client.create_run(exp, start_time=T0, tags=tags, run_name="training").info.run_id
    child_tags = {"mlflow.parentRunId": parent, "minimind.role": "child", "seed": "0"}
    running = client.create_run(
        exp, start_time=T0 + 1000, run_name=f"{LN}/seed0", tags={**child_tags, "variant": LN}
    ).info.run_id
    client.log_batch(running, metrics=[Metric("train/loss", 5.0, T0 + 1000, 1)])

    code, out, err = run_cli(capsys, "training", "--tracking-uri", mlflow_uri)
    assert code == 0, err
    assert re.search(rf"{re.escape(LN)}/seed0.*RUNNING", out)

    log_child(
        client, exp, parent, RMS, 0, T0 + 2000, params=_params(RMS, 0),
        metrics=_curves(RMS, 0, T0),
    )  # fmt: skip
    c = compare(load_runs(mlflow_uri, ["training"]))
    assert _row(c, RMS)["n"] == 1
    assert list(c.problems["status"]) == ["RUNNING"]


def test_a_filter_that_matches_nothing_says_so(store, capsys) -> None:
    filter_string = "tags.`component.mlp` = 'nosuch'"
    code, out, err = run_cli(
        capsys, "norm", "--filter", filter_string, "--tracking-uri", store["uri"]
    )
    assert code == 1 and out == ""
    assert "no run matched the filter" in err and "holds no runs" not in err


def test_generated_reports_go_where_git_ignores_them() -> None:
    from minimind.foundations.paths import REPORTS_DIR

    repo = Path(__file__).resolve().parents[2]
    probe = REPORTS_DIR / "quickstart" / "index.html"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=repo)
    assert ignored.returncode == 0, f"{probe} would be tracked by git"


def test_report_figures_tokens_in_engineering_notation_and_no_truncated_bars(norm) -> None:
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import EngFormatter

    from minimind.compare.plots import curves_figure, final_bar_figure

    curves = curves_figure(norm, "train/loss")
    tokens_axis = curves.axes[1]
    assert isinstance(tokens_axis.xaxis.get_major_formatter(), EngFormatter)
    assert tokens_axis.xaxis.get_major_formatter().format_data(1_500_000) == "1.5M"
    final = final_bar_figure(norm)
    # No bar whose length encodes the value on an axis that does not start at zero.
    assert not [p for p in final.axes[0].patches if isinstance(p, Rectangle)]
    assert final.axes[0].lines  # the mean ± std intervals


def _two_invocations(mlflow_uri: str) -> tuple[str, str]:
    """Experiment `pick`: an invocation of spec 1111aaaa (variants a and b, 2 seeds), then a
    later one of spec 9999bbbb, killed after one run of variant c."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("pick")
    first = log_parent(client, exp, "pick", T0)
    later = log_parent(client, exp, "pick", T0 + 10_000)
    client.set_tag(first, "spec_hash", "1111aaaa2222")
    client.set_tag(later, "spec_hash", "9999bbbb0000")
    client.set_terminated(later, "KILLED")
    params = {"name": "pick", "train.steps": "10"}
    for k, (variant, seed) in enumerate([("a", 0), ("a", 1), ("b", 0), ("b", 1)]):
        metrics = [Metric("val/bpb", 2.0 + 0.1 * k, T0 + 2000, 10)]
        log_child(client, exp, first, variant, seed, T0 + 1000 * (k + 1), params=params,
                  metrics=metrics)  # fmt: skip
    metrics = [Metric("val/bpb", 3.0, T0 + 12_000, 10)]
    log_child(client, exp, later, "c", 0, T0 + 11_000, params=params, metrics=metrics)
    return first, later


def test_the_invocation_is_chosen_by_parent_or_spec_hash(mlflow_uri, capsys) -> None:
    """The default takes the latest invocation by start time (here a killed one of another
    spec) and says so; --spec-hash and --parent take the one asked for."""
    first, later = _two_invocations(mlflow_uri)
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


@pytest.mark.parametrize(
    "chosen",
    [
        ["--all", "--spec-hash", "1111"],
        ["--filter", "tags.variant = 'a'", "--spec-hash", "1111"],
        ["--parent", "abc", "--all"],
        ["--parent", "abc", "--filter", "tags.variant = 'a'"],
        ["--all", "--filter", "tags.variant = 'a'"],
    ],
)
def test_the_ways_of_choosing_runs_exclude_one_another(store, capsys, chosen) -> None:
    """Given together, one of them used to be ignored without a word."""
    with pytest.raises(SystemExit) as e:
        main(["compare", "norm", *chosen, "--tracking-uri", store["uri"]])
    assert e.value.code == 2 and "not allowed with" in capsys.readouterr().err
    with pytest.raises(CompareError, match="choose the runs in different ways"):
        load_runs(
            store["uri"],
            ["norm"],
            all_runs="--all" in chosen,
            filter_string="tags.variant = 'a'" if "--filter" in chosen else "",
            parent_run_id="abc" if "--parent" in chosen else None,
            spec_hash="1111" if "--spec-hash" in chosen else None,
        )


def test_a_spec_hash_in_a_store_without_invocations_is_an_error(mlflow_uri, capsys) -> None:
    """Runs logged without a parent run: no invocation has the hash, and none is pretended."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("orphans")
    run = client.create_run(exp, tags={"variant": "a", "seed": "0"})
    client.set_terminated(run.info.run_id)
    code, out, err = run_cli(capsys, "orphans", "--tracking-uri", mlflow_uri, "--spec-hash", "ab")
    assert code == 2 and out == "" and err.startswith("error: --spec-hash: no invocation")


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


def test_best_value_reads_the_sampled_curve(mlflow_uri) -> None:
    """Runs log the exact val/bpb once and its estimates as val/bpb_sampled: the best value is
    the best sampled evaluation, never the exact final value (another estimator, its own
    column), and the header and caption say so."""
    from minimind.compare import render

    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("best")
    parent = log_parent(client, exp, "best", T0)
    for seed, (mid, final) in enumerate([(1.9, 2.0), (2.3, 2.1)]):
        metrics = [
            Metric("val/bpb_sampled", 2.5, T0, 2),
            Metric("val/bpb_sampled", mid, T0, 5),
            Metric("val/bpb_sampled", final + 0.01, T0, 10),
            Metric("val/bpb", final, T0, 10),
        ]
        log_child(client, exp, parent, "v", seed, T0 + 1000 * (seed + 1),
                  params={"name": "best"}, metrics=metrics)  # fmt: skip
    c = compare(load_runs(mlflow_uri, ["best"]))
    assert sorted(c.runs["val/bpb_best"]) == [1.9, 2.11]  # seed 1's exact 2.1 left out
    assert c.table["val/bpb_best"].iloc[0] == 1.9
    assert "best val/bpb_sampled" in render.display_headers(c)
    assert "best val/bpb_sampled: the best of the periodic estimates" in render.caption(c)


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
    c = compare(runset, power_delta=0.05, references={RMS: LN})
    assert len(c.table) == 3 and c.power_comparisons == 1 and c.power_alpha == pytest.approx(0.05)
    assert "(holm over 1 comparison(s))" in "\n".join(render.noise_lines(c))


def test_one_family_size_for_the_correction_the_level_and_the_power_line(store) -> None:
    """The old invocation's one-run variant is compared with nothing testable: k is the one
    tested comparison in the correction, the intervals' level and the power line alike."""
    runset = load_runs(store["uri"], ["norm"], all_runs=True)
    c = compare(runset, baseline=LN, power_delta=0.05)
    assert len(c.table) == 3 and c.table["val/bpb_p"].notna().sum() == 1
    assert c.n_comparisons == 1 and c.power_comparisons == 1
    assert c.level == pytest.approx(0.95) and c.power_alpha == pytest.approx(0.05)


def test_a_running_run_is_counted_as_running_not_failed() -> None:
    """A run still training (or another invocation's, live) is not "+1 failed"."""
    from minimind.compare.render import seed_count
    from minimind.compare.table import SIZE_PARAMS, _group_row

    statuses = ["FINISHED"] * 3 + ["FAILED", "RUNNING"]
    every_run = pd.DataFrame(
        {
            "status": statuses,
            "seed": range(5),
            **{key: 1.0 for key in SIZE_PARAMS},
            **{key: [3.0, 3.1, 3.2, None, None] for key in ("val/loss", "val/bpb", "val/bpb_best")},
            **{key: 1.0 for key in ("perf/tokens_per_s", "perf/mfu", "sys/peak_mem_mb", "wall_s")},
        }
    )
    row = _group_row("a", every_run.iloc[:3], every_run, "val/bpb")
    assert (row["n"], row["n_failed"], row["n_running"]) == (3, 1, 1)
    assert seed_count(row) == "3 (+1 failed, +1 running)"
    assert seed_count({**row, "n_failed": 0, "n_running": 0}) == "3"


def test_bad_tracking_uri_and_report_dir_are_one_line_exit_2_and_write_nothing(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    cases = [
        (["--tracking-uri", "foo://bar"], "--tracking-uri: MLflow has no tracking store"),
        (["--tracking-uri", f"sqlite:///{notes}"], f"--tracking-uri: {notes} is not an SQLite"),
        (["--report", "--report-dir", str(notes)], f"--report-dir: {notes} is not a directory"),
    ]
    for options, expected in cases:
        assert main(["compare", "quickstart", *options]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {expected}") and err.count("\n") == 1, err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert notes.read_text() == "not a database\n"


def test_compute_counts_the_optimizers_flops_where_runs_record_them() -> None:
    """A Muon run's compute per step adds its Newton–Schulz FLOPs; a run recorded before the
    param existed counts none."""
    from minimind.compare.table import compute_per_step

    runs = pd.DataFrame(
        {
            "run_id": ["adamw", "muon", "old"],
            "params.train.batch_size": ["16", "16", "16"],
            "params.train.seq_len": ["128", "128", "128"],
            "params.flops_per_token": ["1000", "1000", "1000"],
            "params.optimizer_flops_per_token": ["0", "160", None],
        }
    )
    per_step, unit = compute_per_step(runs)
    assert unit == "FLOPs"
    assert per_step.to_dict() == {"adamw": 2048 * 1000, "muon": 2048 * 1160, "old": 2048 * 1000}
