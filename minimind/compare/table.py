"""The comparison table: per-run summaries, aggregated over seeds into one row per variant.

Machine columns are named `<metric>_<stat>` (`val/bpb_mean`, `val/bpb_std`, `val/bpb_n`, ...), so
that CSV and JSON readers get one statistic per column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from minimind.compare.runs import CompareError, RunSet
from minimind.record import (
    FAILURE_REASON_TAG,
    PLAN_HASH_TAG,
    RUN_METRICS,
    curve_metric,
    is_maximized,
)
from minimind.stats.compute import Multiplier, compute_multiplier
from minimind.stats.intervals import (
    CIMethod,
    Correction,
    DeltaCI,
    Noise,
    Pairing,
    Sample,
    compare_family,
    corrected_level,
    family_alpha,
    paired_differences,
    pooled_noise,
    power_comparisons,
    seed_values,
    tested_count,
)
from minimind.stats.power import seeds_for_difference

MISSING_GROUP = "(missing)"
"""The group of runs that lack the `--by` param or tag."""


RECORDED_SIZES = ("num_params", "num_non_embedding_params", "num_active_params")
"""The size params a run records and the table shows as they are."""
TRAINING_FLOPS = "training_flops_per_token"
"""The column of a run's training FLOPs per token: its model's (the run's `flops_per_token`
param, what MFU counts) and its optimizer's (`optimizer_flops_per_token`), summed by
`training_flops_per_token`."""
SIZE_PARAMS = (*RECORDED_SIZES, TRAINING_FLOPS)
"""The size columns of the per-run and per-group tables."""
SPREAD_METRICS = ("val/loss", "val/bpb")
"""Final values reported as mean ± std over seeds."""


@dataclass
class Comparison:
    """One comparison: `table` has a row per group, `runs` a row per run, `problems` the runs
    left out of the statistics (failed, killed, unfinished, or without the objective)."""

    table: pd.DataFrame
    runs: pd.DataFrame
    problems: pd.DataFrame
    metric: str
    by: str
    baseline: str | None
    runset: RunSet
    references: dict[str, str] | None = None
    """Each compared group's reference group when they are not all `baseline`."""
    correction: Correction = "holm"
    n_comparisons: int = 0
    level: float = 0.95
    """The confidence of the deltas' intervals after correction for `n_comparisons`."""
    noise: Noise | None = None
    """The seed-to-seed sd of the objective, pooled over the groups."""
    paired_noise: Noise | None = None
    """The sd of the per-seed differences of the paired comparisons, pooled."""
    power_delta: float | None = None
    power_seeds: dict[str, int | None] | None = None
    """With `power_delta`: seeds per arm for 80% power at `power_alpha` (the family's
    corrected alpha), `unpaired` (from `noise`) and `paired` (from
    `paired_noise`, when there is one); None: more than `power.MAX_SEEDS`."""
    power_alpha: float | None = None
    power_comparisons: int = 1
    """The k of `power_alpha` = 0.05 / k: the tested comparisons, `n_comparisons` (1
    uncorrected)."""
    compute_unit: str = "steps"
    """What the compute multipliers count: `FLOPs`, `tokens` or `steps` (what the params allow)."""
    best_of: str = ""
    """The curve whose best evaluation is the `<metric>_best` column (`curve_key`)."""
    multipliers: dict[str, Multiplier] = field(default_factory=dict)
    """Each compared group's compute multiplier, with its per-seed readings (by seed)."""

    @property
    def maximize(self) -> bool:
        return is_maximized(self.metric)


def resolve_group_key(runs: pd.DataFrame, by: str | None) -> str:
    """The `runs` column to group by: `variant` by default, else a param or tag.

    `by` may be `params.<key>`, `tags.<key>` or a bare key (looked up in params, then tags).
    An unknown key is a usage error that lists the params and tags the runs have.
    """
    if by is None or by == "variant":
        return "variant"
    candidates = [by] if by.startswith(("params.", "tags.")) else [f"params.{by}", f"tags.{by}"]
    for column in candidates:
        if column in runs.columns and runs[column].notna().any():
            return column
    params = sorted(c.removeprefix("params.") for c in runs.columns if c.startswith("params."))
    tags = sorted(
        c.removeprefix("tags.")
        for c in runs.columns
        if c.startswith("tags.") and not c.startswith("tags.mlflow.")
    )
    raise CompareError(
        f"unknown --by key {by!r}; params: {', '.join(params) or '(none)'}; "
        f"tags: {', '.join(tags) or '(none)'}"
    )


def _metric(runs: pd.DataFrame, key: str) -> pd.Series:
    column = f"metrics.{key}"
    if column in runs.columns:
        return pd.to_numeric(runs[column], errors="coerce")
    return pd.Series(np.nan, index=runs.index)


def numeric_param(runs: pd.DataFrame, key: str) -> pd.Series:
    """The param `key` of each run as a number (NaN where a run lacks it, or every run does)."""
    column = f"params.{key}"
    if column in runs.columns:
        return pd.to_numeric(runs[column], errors="coerce")
    return pd.Series(np.nan, index=runs.index)


def _history_stat(runset: RunSet, key: str, how: str) -> pd.Series:
    """A statistic (`min`, `max`, `median`) over each run's history of `key`, by run_id."""
    stats = {}
    for run_id in runset.runs["run_id"]:
        points = runset.history(run_id, key)
        stats[run_id] = points.agg(how) if len(points) else np.nan
    return pd.Series(stats, dtype=float)


def _wall_seconds(runs: pd.DataFrame) -> pd.Series:
    """Training wall-clock (`time/elapsed_s`), else the run's duration in MLflow."""
    duration = (runs["end_time"] - runs["start_time"]).dt.total_seconds()
    return _metric(runs, "time/elapsed_s").fillna(duration)


def _groups(runs: pd.DataFrame, group_column: str) -> pd.Series:
    """Each run's row: its `group_column` value; grouped by variant, runs whose configs differ
    are never pooled (`split_unpoolable`)."""
    group = runs[group_column].fillna(MISSING_GROUP).astype(str)
    return split_unpoolable(runs, group) if group_column == "variant" and len(runs) else group


def summarize_runs(runset: RunSet, metric: str, group_column: str) -> pd.DataFrame:
    """One row per run: identity, status, sizes and final/best/median metric values."""
    runs = runset.runs
    by_id = runs["run_id"]
    best = "max" if is_maximized(metric) else "min"
    curve = curve_key(runset, metric)
    runset.fetch_histories([metric, curve, "perf/tokens_per_s", "perf/mfu"])
    out = pd.DataFrame(
        {
            "run_id": by_id,
            "run_name": runs["run_name"],
            "experiment_id": runs["experiment_id"],
            "group": _groups(runs, group_column),
            "variant": runs["variant"],
            "seed": runs["seed"],
            "status": runs["status"],
            "start_time": runs["start_time"],
            **{key: numeric_param(runs, key) for key in RECORDED_SIZES},
            # the optimizer's FLOPs counted too, so that a Muon arm's compute is its own
            TRAINING_FLOPS: training_flops_per_token(runs),
            "train/loss": _metric(runs, "train/loss"),
            **{key: _metric(runs, key) for key in dict.fromkeys([*SPREAD_METRICS, metric])},
            # One estimator: the best of the curve's evaluations (the periodic estimates when
            # the runs log them; never mixed with the exact final value, its own column).
            f"{metric}_best": by_id.map(_history_stat(runset, curve, best)),
            "perf/tokens_per_s": by_id.map(_history_stat(runset, "perf/tokens_per_s", "median")),
            "perf/mfu": by_id.map(_history_stat(runset, "perf/mfu", "median")),
            "sys/peak_mem_mb": _metric(runs, "sys/peak_mem_mb"),
            "wall_s": _wall_seconds(runs) if len(runs) else pd.Series(dtype=float),
            "failure_reason": runs.get(
                f"tags.{FAILURE_REASON_TAG}", pd.Series(None, index=runs.index)
            ),
        }
    )
    return out.reset_index(drop=True)


UNPOOLED_PARAMS = ("seed", "seeds", "name", "description", "extends")
UNPOOLED_PREFIXES = ("tracking.", "sweep.", "power.", "train.checkpoint_dir", "data.cache_dir")
"""Params that may differ between runs pooled in one row: the seed, and what names, records
or plans a run without changing what it trains."""


def config_signature(runs: pd.DataFrame) -> pd.Series:
    """Per run, the resolved config that trains it: its params but the `UNPOOLED_*` ones."""
    columns = [
        c
        for c in runs.columns
        if c.startswith("params.")
        and c.removeprefix("params.") not in UNPOOLED_PARAMS
        and not c.removeprefix("params.").startswith(UNPOOLED_PREFIXES)
    ]
    rows = runs[columns].itertuples(index=False)
    return pd.Series(["|".join(map(str, row)) for row in rows], index=runs.index, dtype=object)


def split_unpoolable(runs: pd.DataFrame, group: pd.Series) -> pd.Series:
    """`group`, with the runs of a group whose resolved configs differ (other than in the seed)
    split into rows of their own, named `<group> @<spec hash>` (the first 8 characters of the
    `plan_hash` tag of the split's first run), or `<group> @config<k>` when the hashes do not
    tell the configs apart."""
    signature = config_signature(runs)
    out = group.copy()
    for name in group.unique():
        mine = group == name
        kinds = list(dict.fromkeys(signature[mine]))
        if len(kinds) < 2:
            continue
        column = f"tags.{PLAN_HASH_TAG}"
        labels = []
        for kind in kinds:
            hashes = runs.loc[mine & (signature == kind)].get(column, pd.Series(dtype=object))
            hashes = hashes.dropna()
            labels.append(f"@{str(hashes.iloc[0])[:8]}" if len(hashes) else "")
        if len(set(labels)) < len(labels):  # one spec, several configs (a sweep's trials)
            labels = [f"@config{k}" for k in range(len(kinds))]
        for kind, label in zip(kinds, labels, strict=True):
            out[mine & (signature == kind)] = f"{name} {label}"
    return out


def _problem_reason(row: pd.Series, metric: str) -> str:
    if isinstance(row["failure_reason"], str) and row["failure_reason"]:
        return row["failure_reason"]
    if row["status"] != "FINISHED":
        return f"status {row['status']} (no failure_reason tag)"
    return f"no {metric} logged"


def split_problems(per_run: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(finished runs with the objective, the other runs with a `reason` column)."""
    ok = (per_run["status"] == "FINISHED") & per_run[metric].notna()
    problems = per_run[~ok].copy()
    problems["reason"] = [_problem_reason(row, metric) for _, row in problems.iterrows()]
    return per_run[ok], problems.reset_index(drop=True)


def _group_row(group: str, runs: pd.DataFrame, every_run: pd.DataFrame, metric: str) -> dict:
    """Statistics over `runs` (the group's finished runs); sizes from `every_run` of the group,
    since they are known before training."""
    # A RUNNING run is still training (or its process died unseen): not a failure, yet.
    running = int((every_run["status"] == "RUNNING").sum())
    row: dict = {
        "variant": group,
        "n": len(runs),
        "n_failed": len(every_run) - len(runs) - running,
        "n_running": running,
    }
    row["n_seeds"] = runs["seed"].nunique()  # fewer than n when a seed was rerun
    for key in SIZE_PARAMS:
        values = every_run[key].dropna()
        row[key] = values.iloc[0] if len(values) else np.nan
    for key in dict.fromkeys([*SPREAD_METRICS, metric]):
        # One value per seed: a seed's reruns are one observation (averaged).
        values = seed_values(Sample.of(runs[key], runs["seed"]))
        row[f"{key}_mean"] = values.mean() if len(values) else np.nan
        row[f"{key}_std"] = values.std(ddof=1) if len(values) > 1 else np.nan
        row[f"{key}_n"] = len(values)
    best = runs[f"{metric}_best"].dropna()
    row[f"{metric}_best"] = (
        (best.max() if is_maximized(metric) else best.min()) if len(best) else np.nan
    )
    row["perf/tokens_per_s_median"] = runs["perf/tokens_per_s"].median()
    row["perf/mfu_median"] = runs["perf/mfu"].median()
    row["sys/peak_mem_mb_max"] = runs["sys/peak_mem_mb"].max()
    row["wall_s_mean"] = runs["wall_s"].mean()
    return row


def curve_key(runset: RunSet, metric: str) -> str:
    """The metric whose history is `metric`'s curve: its periodic estimate
    (`record.curve_metric`) when the runs log one (the final `metric` is then exact), else
    `metric` (runs recorded before the exact evaluation existed)."""
    sampled = curve_metric(metric)
    return sampled if f"metrics.{sampled}" in runset.runs.columns else metric


def tokens_per_step(runs: pd.DataFrame) -> pd.Series:
    """Each run's training tokens per optimizer step: batch × context × accumulation (NaN for a
    run that lacks them)."""
    tokens = numeric_param(runs, "train.batch_size") * numeric_param(runs, "train.seq_len")
    return tokens * numeric_param(runs, "train.grad_accum").fillna(1.0)


def training_flops_per_token(runs: pd.DataFrame) -> pd.Series:
    """Each run's training FLOPs per token: its model's (`flops_per_token`) and its optimizer's
    own matrix arithmetic (`optimizer_flops_per_token`: Muon's Newton–Schulz iterations), which
    runs recorded before that param count as none."""
    optimizer = numeric_param(runs, "optimizer_flops_per_token").fillna(0.0)
    return numeric_param(runs, "flops_per_token") + optimizer


def compute_per_step(runs: pd.DataFrame) -> tuple[pd.Series, str]:
    """Each run's compute per optimizer step, by run_id, and its unit: FLOPs (tokens per step
    × training FLOPs per token, the optimizer's included) when every run has both, else
    tokens, else 1 step."""
    tokens = tokens_per_step(runs)
    flops = tokens * training_flops_per_token(runs)
    for values, unit in ((flops, "FLOPs"), (tokens, "tokens")):
        if len(runs) and values.notna().all():
            return pd.Series(values.to_numpy(), index=runs["run_id"]), unit
    return pd.Series(1.0, index=runs["run_id"]), "steps"


def _multipliers(
    runset: RunSet, finished: pd.DataFrame, baseline: str, metric: str, level: float
) -> tuple[dict[str, Multiplier], str]:
    """Each group's effective compute multiplier against the baseline's validation curves: each
    run's final `metric` (the exact value where the curve is its periodic estimate) read off
    the baseline run of its seed, or off the baseline's mean curve (over its seeds, at the steps
    they all evaluated) where the baseline did not run that seed."""
    per_step, unit = compute_per_step(runset.runs)
    if is_maximized(metric):  # throughput and MFU have no learning curve to read
        return {}, unit
    key = curve_key(runset, metric)
    curves = {r: runset.history(r, key) for r in finished["run_id"]}
    finals = {r: runset.history(r, metric) for r in finished["run_id"]}
    seeds = finished.set_index("run_id")["seed"]
    base_runs = [r for r in finished.loc[finished["group"] == baseline, "run_id"] if len(curves[r])]
    if not base_runs:
        return {}, unit

    def as_xy(curve: pd.Series, run: str) -> tuple[np.ndarray, np.ndarray]:
        return curve.index.to_numpy(dtype=float) * per_step[run], curve.to_numpy(dtype=float)

    mean = pd.concat([curves[r] for r in base_runs], axis=1, join="inner").mean(axis=1)
    mean_xy = as_xy(mean, base_runs[0])
    base_of_seed = {seeds[r]: r for r in base_runs if pd.notna(seeds[r])}
    out = {}
    for group, runs in finished.groupby("group", sort=False):
        ids = [r for r in runs["run_id"] if len(finals[r])]
        own = [base_of_seed.get(seeds[r]) for r in ids]
        out[group] = compute_multiplier(
            [mean_xy if b is None else as_xy(curves[b], b) for b in own],
            np.array([finals[r].iloc[-1] for r in ids], dtype=float),
            np.array([finals[r].index[-1] * per_step[r] for r in ids], dtype=float),
            maximize=is_maximized(metric),
            level=level,
            labels=[seeds[r] for r in ids],
        )
    return out, unit


@dataclass(frozen=True)
class CompareOptions:
    """What a comparison is asked, given once by each caller (`minimind compare`, the study's
    axes, each rung of a ladder).

    `metric` is the objective; `by` the param or tag to group by (`resolve_group_key`; the
    variant by default); `baseline` the group the deltas are taken against (default: the group
    of the earliest run); `ci`, `correction` and `paired` choose the interval, the
    multiple-comparison correction and the pairing (`stats.compare_family`); `power_delta` asks
    for the seeds per arm that detect that difference (docs/statistics.md). `references`
    replaces "every group against the baseline" with an explicit family: each key group is
    compared with its value group, and groups that are no key are rows without a delta.
    """

    metric: str = "val/bpb"
    by: str | None = None
    baseline: str | None = None
    ci: CIMethod = "auto"
    correction: Correction = "holm"
    paired: Pairing = "auto"
    power_delta: float | None = None
    references: Mapping[str, str] | None = None


DELTA_COLUMNS = {
    "delta": "delta",
    "low": "delta_low",
    "high": "delta_high",
    "simultaneous_low": "delta_low_simultaneous",
    "simultaneous_high": "delta_high_simultaneous",
    "level": "delta_level",
    "method": "delta_method",
    "note": "delta_note",
    "p": "p",
    "p_adj": "p_adj",
    "pairs": "pairs",
    "within_noise": "within_noise",
    "mde": "mde",
}
"""Each attribute of `DeltaCI` (its fields and `within_noise`) and the suffix of its column,
`<metric>_<suffix>`, in the table's column order."""


def delta_columns(metric: str, cis: list[DeltaCI]) -> dict[str, list | pd.Series]:
    """The delta columns of the rows whose intervals are `cis`: one per `DELTA_COLUMNS` entry;
    `pairs` is None for a row that is not paired, and `within_noise` keeps None for a row not
    tested (an object column)."""
    columns: dict[str, list | pd.Series] = {}
    for attribute, suffix in DELTA_COLUMNS.items():
        values = [getattr(c, attribute) for c in cis]
        if attribute == "pairs":
            values = [v if c.method == "paired" else None for v, c in zip(values, cis, strict=True)]
        column = f"{metric}_{suffix}"
        columns[column] = pd.Series(values, dtype=object) if attribute == "within_noise" else values
    return columns


def _check_metric(runset: RunSet, metric: str) -> None:
    logged = {c.removeprefix("metrics.") for c in runset.runs.columns if c.startswith("metrics.")}
    if metric not in logged.union(RUN_METRICS):  # a run metric may be missing: failed runs
        raise CompareError(
            f"unknown --metric {metric!r}; logged metrics: {', '.join(sorted(logged)) or '(none)'}"
        )


def _references(groups: list[str], options: CompareOptions) -> tuple[str | None, dict[str, str]]:
    """The baseline group and each compared group's reference: `options.references`, else every
    group against the baseline (by default the first group, the spec's first variant)."""
    baseline = options.baseline
    if baseline is not None and baseline not in groups:
        raise CompareError(
            f"unknown --baseline {baseline!r}; variants: {', '.join(groups) or '(none)'}"
        )
    if baseline is None and groups:
        baseline = groups[0]
    if options.references is not None:
        unknown = sorted({g for pair in options.references.items() for g in pair} - set(groups))
        if unknown:
            raise CompareError(
                f"unknown variant(s) {', '.join(unknown)} in the comparisons; "
                f"variants: {', '.join(groups) or '(none)'}"
            )
        return baseline, dict(options.references)
    return baseline, {g: baseline for g in groups if baseline is not None and g != baseline}


@dataclass(frozen=True)
class _Family:
    """The deltas of the compared groups, with the noise they were read against."""

    intervals: dict[str, DeltaCI]
    noise: Noise
    paired_noise: Noise | None


def _family(
    groups: pd.Series, finished: pd.DataFrame, reference_of: dict[str, str], options: CompareOptions
) -> _Family:
    """Each compared group's delta against its reference (`stats.compare_family`), and the
    pooled seed-to-seed noise of the objective and of the paired differences."""
    metric = options.metric
    samples = {
        g: Sample.of(runs[metric], runs["seed"])
        for g, runs in ((g, finished[finished["group"] == g]) for g in groups)
    }
    noise = pooled_noise([seed_values(s) for s in samples.values()])
    others = {g: samples[g] for g in reference_of}
    against = {g: samples[ref] for g, ref in reference_of.items()}
    differences = [paired_differences(others[g], against[g], options.paired) for g in others]
    paired_noise = pooled_noise(differences) if any(len(d) for d in differences) else None
    intervals = compare_family(
        others,
        against,
        method=options.ci,
        correction=options.correction,
        pairing=options.paired,
        noise_sd=noise.sd,
    )
    return _Family(intervals, noise, paired_noise)


def _compute_columns(
    table: pd.DataFrame,
    runset: RunSet,
    finished: pd.DataFrame,
    reference_of: dict[str, str],
    metric: str,
    level: float,
) -> dict[str, Multiplier]:
    """Each compared group's compute multiplier against its reference's curves, set as the
    `compute_x*` columns of `table`."""
    multipliers: dict[str, Multiplier] = {}
    for ref in dict.fromkeys(reference_of.values()):
        against_ref, _ = _multipliers(runset, finished, ref, metric, level)
        multipliers.update({g: m for g, m in against_ref.items() if reference_of.get(g) == ref})
    none = Multiplier(np.nan, np.nan, np.nan, "none", 0)
    found = [multipliers.get(g, none) for g in table["variant"]]
    # A bound is never a value: readers of the CSV would take it for the multiplier.
    table["compute_x"] = [m.value if m.where == "inside" else np.nan for m in found]
    table["compute_x_bound"] = [
        m.value if m.where in ("beyond", "before") else np.nan for m in found
    ]
    table["compute_x_low"] = [m.low for m in found]
    table["compute_x_high"] = [m.high for m in found]
    table["compute_x_where"] = [m.where for m in found]
    return multipliers


def _power_seeds(
    options: CompareOptions, family: _Family | None, k: int
) -> tuple[dict[str, int | None] | None, float | None]:
    """With `options.power_delta`: the seeds per arm that detect it at the family's corrected
    alpha, unpaired (and paired when there are pairs), and that alpha."""
    delta = options.power_delta
    if delta is None or family is None or not family.noise.df > 0:
        return None, None
    seeds: dict[str, int | None] = {
        "unpaired": seeds_for_difference(delta, family.noise.sd, design="unpaired", comparisons=k)
    }
    paired = family.paired_noise
    if paired is not None and paired.df > 0:
        seeds["paired"] = seeds_for_difference(delta, paired.sd, design="paired", comparisons=k)
    return seeds, family_alpha(k, options.correction)


def compare(runset: RunSet, options: CompareOptions | None = None) -> Comparison:
    """Aggregate `runset` into one row per group, with deltas against the baseline or each
    group's reference (`CompareOptions`).

    The rows are sorted by the objective's mean, best first; groups where no run finished come
    last. Each delta has an interval at the level corrected for the number of comparisons with
    the baseline (`stats.compare_family`), its raw and corrected p-values, and
    `<metric>_within_noise` is True when the corrected test does not reject (None for a row
    not tested), `<metric>_pairs` the pairs of a paired row, and
    `<metric>_mde` the smallest difference the design detects (`DELTA_COLUMNS`).
    """
    options = options or CompareOptions()
    metric, correction = options.metric, options.correction
    group_column = resolve_group_key(runset.runs, options.by)
    _check_metric(runset, metric)
    per_run = summarize_runs(runset, metric, group_column)
    finished, problems = split_problems(per_run, metric)
    # In order of first run; the runner runs variants in spec order.
    groups = list(dict.fromkeys(per_run.sort_values("start_time")["group"]))
    baseline, reference_of = _references(groups, options)
    rows = [
        _group_row(g, finished[finished["group"] == g], per_run[per_run["group"] == g], metric)
        for g in groups
    ]
    table = pd.DataFrame(rows)
    family = None
    multipliers: dict[str, Multiplier] = {}
    if len(table):
        family = _family(table["variant"], finished, reference_of, options)
        reference_row = DeltaCI(0.0, np.nan, np.nan, "baseline")
        table["is_baseline"] = ~table["variant"].isin(list(reference_of))
        table["reference"] = [reference_of.get(g) for g in table["variant"]]
        cis = [family.intervals.get(g, reference_row) for g in table["variant"]]
        for column, values in delta_columns(metric, cis).items():
            table[column] = values
        # The level of the deltas' intervals: corrected for the comparisons that have one.
        level = corrected_level(tested_count(family.intervals), correction)
        multipliers = _compute_columns(table, runset, finished, reference_of, metric, level)
        table = table.sort_values(
            f"{metric}_mean", ascending=not is_maximized(metric), na_position="last", kind="stable"
        ).reset_index(drop=True)
    n_comparisons = tested_count(family.intervals if family else {})
    # The family's k, as in its correction and its MDEs: the comparisons that were tested.
    k = power_comparisons(n_comparisons, correction)
    power_seeds, alpha = _power_seeds(options, family, k)
    return Comparison(
        table=table,
        runs=per_run,
        problems=problems,
        metric=metric,
        by=group_column.removeprefix("params.").removeprefix("tags."),
        baseline=baseline,
        runset=runset,
        references=dict(options.references) if options.references is not None else None,
        correction=correction,
        n_comparisons=n_comparisons,
        level=corrected_level(n_comparisons, correction),
        noise=family.noise if family else None,
        paired_noise=family.paired_noise if family else None,
        power_delta=options.power_delta,
        power_seeds=power_seeds,
        power_alpha=alpha,
        power_comparisons=k,
        compute_unit=compute_per_step(runset.runs)[1] if len(table) else "steps",
        best_of=curve_key(runset, metric),
        multipliers=multipliers,
    )
