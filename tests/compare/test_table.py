"""`compare.table`: the per-group statistics of a synthetic store whose aggregates are computed by
hand (`norm_store.EXPECTED`), the intervals, grouping, pooling and the compute multiplier."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from fake_runs import log_child, log_parent
from mlflow import MlflowClient
from mlflow.entities import Metric
from norm_store import (
    EXPECTED,
    FINAL_BPB,
    LN,
    RMS,
    T0,
    norm_curves,
    norm_params,
    row_of,
    run_cli,
)
from scipy import stats

from minimind.compare import (
    CompareOptions,
    compare,
    load_runs,
)


@pytest.mark.parametrize("variant", [LN, RMS])
def test_aggregates_match_hand_computed_values(norm, variant: str) -> None:
    row = row_of(norm, variant)
    for column, expected in EXPECTED[variant].items():
        assert row[column] == pytest.approx(expected, rel=1e-9), column
    assert row["num_params"] == 123456 and row["training_flops_per_token"] == 740736
    assert row["n_failed"] == 1
    # independently: numpy's sample std
    assert row["val/bpb_std"] == pytest.approx(np.std(FINAL_BPB[variant], ddof=1))


def test_sorted_by_objective_and_default_baseline_is_first_variant(norm) -> None:
    assert list(norm.table["variant"]) == [RMS, LN]  # rmsnorm has the lower val/bpb
    assert norm.baseline == LN  # the first variant that ran
    base = row_of(norm, LN)
    assert bool(base["is_baseline"]) and base["val/bpb_delta_method"] == "baseline"
    rms = row_of(norm, RMS)
    assert rms["val/bpb_delta"] == pytest.approx(2.02 - 2.15)
    assert rms["val/bpb_delta_method"] == "paired"  # both ran seeds 0, 1, 2
    assert rms["val/bpb_delta_low"] <= rms["val/bpb_delta"] <= rms["val/bpb_delta_high"]


def test_paired_interval_matches_hand_computation(norm) -> None:
    rms = row_of(norm, RMS)
    d = np.subtract(FINAL_BPB[RMS], FINAL_BPB[LN])  # seed by seed: -0.10, -0.18, -0.11
    half = stats.t.ppf(0.975, 2) * np.std(d, ddof=1) / math.sqrt(3)
    assert rms["val/bpb_delta_low"] == pytest.approx(-0.13 - half)
    assert rms["val/bpb_delta_high"] == pytest.approx(-0.13 + half)
    assert rms["val/bpb_p"] == pytest.approx(stats.ttest_rel(FINAL_BPB[RMS], FINAL_BPB[LN]).pvalue)
    assert rms["val/bpb_p_adj"] == rms["val/bpb_p"]  # one comparison: nothing to correct
    assert rms["val/bpb_delta_level"] == 0.95 and norm.n_comparisons == 1


def test_welch_interval_matches_hand_computation(store) -> None:
    rms = row_of(compare(load_runs(store["uri"], ["norm"]), CompareOptions(paired="off")), RMS)
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
    rms = row_of(compare(load_runs(store["uri"], ["norm"]), CompareOptions(ci="bootstrap")), RMS)
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
    c = compare(load_runs(store["uri"], ["norm"], all_runs=True), CompareOptions(by="model.norm"))
    assert c.by == "model.norm"
    ln = row_of(c, "layernorm")
    assert ln["n"] == 4  # the old invocation's run has model.norm=layernorm too
    # ... of seed 0, as one of this invocation's: a seed's reruns are one observation
    assert ln["n_seeds"] == 3 and ln["val/bpb_n"] == 3
    assert ln["val/bpb_mean"] == pytest.approx(np.mean([2.10, 2.20, 2.15]))
    assert ln["val/bpb_std"] == pytest.approx(np.std([2.10, 2.20, 2.15], ddof=1))


def test_other_objective_sorts_by_it(store) -> None:
    c = compare(load_runs(store["uri"], ["norm"]), CompareOptions(metric="perf/tokens_per_s"))
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
            params=norm_params(RMS, seed), metrics=norm_curves(RMS, seed, T0), run_name=name,
        )  # fmt: skip
    untagged = client.create_run(
        exp,
        start_time=T0 + 3000,
        run_name="norm=layernorm/seed2",
        tags={"mlflow.parentRunId": parent, "minimind.role": "child"},
    ).info.run_id
    client.log_batch(untagged, metrics=norm_curves(LN, 2, T0))
    client.set_terminated(untagged, "FINISHED", end_time=T0 + 40_000)

    runs = load_runs(mlflow_uri, ["named"]).runs.set_index("run_name")
    assert runs.loc["first attempt", "variant"] == "norm=rmsnorm"
    assert runs.loc["norm=rmsnorm/seed9", "seed"] == 1  # the tag, not the name's 9
    assert runs.loc["norm=layernorm/seed2", "variant"] == "norm=layernorm/seed2"
    assert np.isnan(runs.loc["norm=layernorm/seed2", "seed"])
    c = compare(load_runs(mlflow_uri, ["named"]))
    assert row_of(c, "norm=rmsnorm")["n"] == 2 and row_of(c, "norm=layernorm/seed2")["n"] == 1


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
    row = row_of(compare(load_runs(mlflow_uri, ["paired_compute"])), "b")
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
    row = row_of(compare(load_runs(mlflow_uri, ["exact_final"])), "b")
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
    row = row_of(c, "b")
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
            params = {**norm_params(LN, seed), "model.dim": dim, "seeds": str(seeds)}
            log_child(
                client, exp, parent, "x", seed, start, params=params,
                metrics=norm_curves(LN, seed, start), tags={"spec_hash": spec_hash},
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
        client, exp, parent, RMS, 0, T0 + 2000, params=norm_params(RMS, 0),
        metrics=norm_curves(RMS, 0, T0),
    )  # fmt: skip
    c = compare(load_runs(mlflow_uri, ["training"]))
    assert row_of(c, RMS)["n"] == 1
    assert list(c.problems["status"]) == ["RUNNING"]


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


def test_one_family_size_for_the_correction_the_level_and_the_power_line(store) -> None:
    """The old invocation's one-run variant is compared with nothing testable: k is the one
    tested comparison in the correction, the intervals' level and the power line alike."""
    runset = load_runs(store["uri"], ["norm"], all_runs=True)
    c = compare(runset, CompareOptions(baseline=LN, power_delta=0.05))
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


def test_the_delta_columns_are_generated_from_every_attribute_of_the_interval(norm) -> None:
    """One column per `DeltaCI` field and `within_noise`, holding each row's interval."""
    import dataclasses

    from minimind.compare.table import DELTA_COLUMNS
    from minimind.stats.intervals import DeltaCI

    attributes = {f.name for f in dataclasses.fields(DeltaCI)} | {"within_noise"}
    assert set(DELTA_COLUMNS) == attributes
    rms = row_of(norm, RMS)
    for suffix in DELTA_COLUMNS.values():
        assert f"val/bpb_{suffix}" in norm.table.columns
    assert rms["val/bpb_delta"] == pytest.approx(2.02 - 2.15)
    assert rms["val/bpb_delta_low"] < rms["val/bpb_delta"] < rms["val/bpb_delta_high"]


def test_training_flops_have_their_own_name_beside_the_models(mlflow_uri) -> None:
    """A run's `flops_per_token` param is its model's; the table's `training_flops_per_token`
    adds the optimizer's (none for a run recorded before the optimizer's param)."""
    client = MlflowClient(mlflow_uri)
    exp = client.create_experiment("flops")
    parent = log_parent(client, exp, "flops", T0)
    extra = {"a": {"optimizer_flops_per_token": "100"}, "b": {}}
    for i, variant in enumerate(("a", "b")):
        start = T0 + 1000 * (i + 1)
        log_child(
            client, exp, parent, variant, 0, start,
            params={**norm_params(LN, 0), **extra[variant]},
            metrics=norm_curves(LN, 0, start),
        )  # fmt: skip
    c = compare(load_runs(mlflow_uri, ["flops"]))
    assert "flops_per_token" not in c.table.columns and "flops_per_token" not in c.runs.columns
    flops = c.table.set_index("variant")["training_flops_per_token"]
    assert flops.to_dict() == {"a": 740736 + 100, "b": 740736}
