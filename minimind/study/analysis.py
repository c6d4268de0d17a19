"""From a study manifest and the tracking store to each axis's comparison and its findings.

Each axis is one `compare.Comparison` over the runs of its arms (groups named by the arms'
labels), its comparisons one family for the multiple-comparison correction. Each finding then
sets the observed difference against what the literature expects: it **agrees**, **disagrees**,
or the design is **too weak to tell** (docs/statistics.md, "Studies").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from minimind.compare import CompareError, CompareOptions, Comparison, RunSet, compare, load_runs
from minimind.compare.tuning import TuningCurve, edge_warnings, trial_runs, tuning_curves
from minimind.record import is_maximized
from minimind.stats.intervals import Sample, paired_differences, power_comparisons
from minimind.stats.power import SeedsPlan, plan_seeds
from minimind.stats.sequential import Standing
from minimind.study.manifest import Arm, ArmComparison, Axis, Expectation, Study, where_matches

Agreement = Literal["agrees", "disagrees", "too weak to tell", "no interval"]


class StudyError(CompareError):
    """A study whose runs cannot be analysed (an arm without runs, a missing experiment)."""


@dataclass(frozen=True)
class Finding:
    """One comparison of an axis: the manifest's `comparison`, the labels of its two arms, the
    axis table's row of the arm (`compare.table` columns), and the agreement with the
    literature."""

    comparison: ArmComparison
    arm: str
    against: str
    row: pd.Series
    agreement: Agreement
    calibration: bool = False
    """A calibration row (`Study.is_calibration`): one arm's runs on disjoint seeds, or two arms
    equal by construction, which must come out no different."""
    edges: tuple[str, ...] = ()
    """'<arm label>: <param> = <value> is the lowest value its sweep tried ...' for each side
    tuned on the edge of its sweep's grid (`compare.tuning`): not a tuned value."""
    plan: SeedsPlan | None = None
    """When too weak to tell: the paired seeds that would settle it with 80% power at the
    family's corrected alpha, from this pair's measured noise (with the range its sd's
    interval implies): for `equal`, equivalence within the study's margin (TOST power, the
    true difference 0); for `better`/`worse`, a difference the size of the margin, the
    study's smallest difference of interest. Never the observed difference: power computed
    from it is a restatement of the p-value (Hoenig & Heisey 2001)."""
    standing: Standing | None = None
    """Where it stands in the sequential design: the look it stopped at, why, and the seeds
    it used (`planning.with_standings`); None until attached."""


@dataclass(frozen=True)
class Decided:
    """The one interval a finding's verdict rests on: `delta` with [`low`, `high`], and
    `basis`, which interval it is: the sequential design's repeated interval at the look it
    stopped (or reached the cap) at, else the fixed-sample one (`deciding_interval`)."""

    delta: float
    low: float
    high: float
    basis: str
    step: bool = False
    """The fixed-sample interval of the row's correction step (Holm's), the one its corrected
    p-value tests: it excludes 0 exactly when that p-value is below 0.05. The sequential and
    the simultaneous intervals have no such p-value."""


def deciding_interval(finding: Finding, metric: str, comparisons: int) -> Decided | None:
    """The interval that decides `finding`: where the sequential design stopped it (a
    difference, equivalence, or the cap), its repeated interval over the seeds of that look;
    otherwise the fixed-sample interval over every seed, the simultaneous (Bonferroni over the
    family's `comparisons`) one for an `equal` expectation and the Holm step's for a direction
    (`agreement`). None without an interval."""
    s = finding.standing
    if s is not None and s.stop != "open" and math.isfinite(s.low) and math.isfinite(s.high):
        delta = s.delta if math.isfinite(s.delta) else float(finding.row[f"{metric}_delta"])
        return Decided(delta, s.low, s.high, f"sequential, look {s.look} ({s.seeds} seeds)")
    row = finding.row
    if row.get(f"{metric}_delta_method", "none") in ("none", "baseline"):
        return None
    delta = float(row[f"{metric}_delta"])
    if finding.comparison.expect == "equal" or finding.calibration:
        low, high = (row.get(f"{metric}_delta_{e}_simultaneous", np.nan) for e in ("low", "high"))
        level = 1 - 0.05 / max(comparisons, 1)
        basis = f"fixed sample, {100 * level:.4g}% simultaneous"
    else:
        low, high = row[f"{metric}_delta_low"], row[f"{metric}_delta_high"]
        basis = f"fixed sample, {100 * float(row[f'{metric}_delta_level']):.4g}%"
    if pd.isna(low) or pd.isna(high):
        return None
    step = not (finding.comparison.expect == "equal" or finding.calibration)
    return Decided(delta, float(low), float(high), basis, step)


def rules_out_source(comparison: ArmComparison, low: float, high: float, maximize: bool) -> bool:
    """Whether [`low`, `high`] excludes the sourced magnitude (its smaller end) on the side
    `expect` names: the data contradict the size the literature reports, even where they
    cannot tell the direction."""
    size = comparison.magnitude_range()
    if size is None or comparison.expect == "equal":
        return False
    up = (comparison.expect == "better") == maximize  # the expected change raises the metric
    return high < size[0] if up else low > -size[0]


@dataclass(frozen=True)
class AxisResult:
    axis: Axis
    comparison: Comparison
    findings: list[Finding]
    tuning: dict[str, list[TuningCurve]] = field(default_factory=dict)
    """The tuning curves of each of the axis's arms that a sweep tuned, by its label
    (`ArmTuning.curves`)."""


def agreement(
    expect: Expectation | ArmComparison,
    row: pd.Series,
    metric: str,
    margin: float,
    maximize: bool,
) -> Agreement:
    """Whether the difference in `row` agrees with `expect`, at the family's corrected level.

    `better`/`worse`: agrees when the corrected (Holm by default) test finds a difference in
    that direction, disagrees when it finds one in the other, and is too weak to tell otherwise.
    `equal` is an equivalence test (TOST) decided by the simultaneous interval at the Bonferroni
    level 1 - alpha/k, never the row's Holm-step one (Holm orders the steps by the difference
    tests' p-values, which give no standing to an equivalence test): agrees when all of it lies
    within ±`margin`, disagrees when all of it lies outside, and is too weak to tell when it
    straddles the margin.

    Given the whole `ArmComparison`, a `better`/`worse` row whose test finds no difference
    disagrees when its interval rules out the sourced magnitude (`rules_out_source`).
    """
    comparison = expect if isinstance(expect, ArmComparison) else None
    expect = expect.expect if isinstance(expect, ArmComparison) else expect
    delta = row[f"{metric}_delta"]
    if row[f"{metric}_delta_method"] in ("none", "baseline") or math.isnan(
        row[f"{metric}_delta_low"]
    ):
        return "no interval"
    if expect == "equal":
        low, high = (row[f"{metric}_delta_{e}_simultaneous"] for e in ("low", "high"))
        if -margin <= low and high <= margin:
            return "agrees"
        if low > margin or high < -margin:
            return "disagrees"
        return "too weak to tell"
    within_noise = row[f"{metric}_within_noise"]
    if within_noise is None or pd.isna(within_noise) or within_noise:  # untested, or no difference
        if comparison is not None:
            low, high = row[f"{metric}_delta_low"], row[f"{metric}_delta_high"]
            if rules_out_source(comparison, low, high, maximize):
                return "disagrees"
        return "too weak to tell"
    improved = (delta > 0) == maximize
    return "agrees" if improved == (expect == "better") else "disagrees"


def load_every_run(study: Study, tracking_uri: str) -> dict[str, RunSet]:
    """Every run of every experiment an arm names (`tried_beyond` too), its sweep trials
    included."""
    experiments = dict.fromkeys(
        name for arm in study.arms.values() for name in (arm.experiment, *arm.tried_beyond)
    )
    return {name: load_runs(tracking_uri, [name], all_runs=True) for name in experiments}


def load_experiments(study: Study, tracking_uri: str) -> dict[str, RunSet]:
    """The evaluation runs (`evaluation_runs`) of every experiment an arm names."""
    every = load_every_run(study, tracking_uri)
    return {name: evaluation_runs(study, name, runset) for name, runset in every.items()}


def evaluation_runs(study: Study, name: str, runset: RunSet) -> RunSet:
    """Experiment `name`'s runs without a sweep's trials (tagged `trial_number`: they chose a
    tuned arm's values) and without the runs of the study's tuning seeds (a trial's seed
    evaluating the arm it chose is a selection bias). Every invocation, not the latest: a
    sequential look trains its new seeds in another invocation (`minimind study --train`), and
    they join the earlier ones. A sweep whose trials ran seeds that `tuning_seeds` does not
    state is refused (`StudyError`)."""
    runs = runset.runs
    trial = trial_runs(runs)
    seed = runs.get("seed", pd.Series(index=runs.index, dtype=float))
    undeclared = set(seed[trial].dropna().astype(int)) - set(study.tuning_seeds)
    if undeclared:
        raise StudyError(
            f"tuning_seeds: the sweep trials in {name} ran seeds {sorted(undeclared)}, "
            "which tuning_seeds does not list: state them, so that no run of theirs "
            "evaluates an arm"
        )
    evaluation = ~trial & ~seed.isin(study.tuning_seeds)
    return RunSet(
        runs[evaluation].reset_index(drop=True),
        runset.parents,
        runset.experiments,
        "every invocation; a sweep's trials and the tuning seeds left out",
        runset.tracking_uri,
        runset.client,
    )


@dataclass(frozen=True)
class ArmTuning:
    """How a sweep tuned an arm (`compare.tuning`): a line for each value it tuned on the edge of
    what the sweep's trials and its `tried_beyond` runs at the tuning seeds tried, or beaten by
    those runs at one point (their median; then the arm is not tuned), and the curve of each
    param searched."""

    edges: list[str]
    curves: list[TuningCurve]


def arm_tuning(
    study: Study, every: Mapping[str, RunSet], runsets: Mapping[str, RunSet]
) -> dict[str, ArmTuning]:
    """`ArmTuning` of every arm whose experiment holds a sweep's trials, by key."""
    tuning = {}
    for key, arm in study.arms.items():
        runs = every[arm.experiment].runs
        trials = runs[trial_runs(runs)]
        if not trials.empty:
            mine = arm_runs(key, arm, runsets[arm.experiment])
            beyond = [every[name].runs for name in arm.tried_beyond]
            tried = pd.concat(beyond, ignore_index=True) if beyond else None
            if tried is not None:
                finished = tried["status"] == "FINISHED"
                tried = tried[finished & tried["seed"].isin(study.tuning_seeds)]
            edges = edge_warnings(mine, trials, tried, f"metrics.{study.metric}")
            tuning[key] = ArmTuning(edges, tuning_curves(mine, trials, tried))
    return tuning


def newest_per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """One run per seed: the newest FINISHED one, else the newest (so that a seed that only
    failed still shows as a problem): a seed trained again by a later invocation counts once."""
    finished = runs["status"] == "FINISHED"
    order = runs.assign(_finished=finished).sort_values(["_finished", "start_time"])
    return order.groupby("seed").tail(1).drop(columns="_finished").sort_values("seed")


def arm_runs(key: str, arm: Arm, runset: RunSet) -> pd.DataFrame:
    """The runs of `arm` in its experiment's `runset` (`newest_per_seed`), with `variant` set to
    its label: one variant's runs, or `StudyError` naming the arm."""
    runs = runset.runs[arm_selection(key, arm, runset)]
    return newest_per_seed(runs).assign(variant=arm.label)


def arm_variant(key: str, arm: Arm, runset: RunSet) -> str:
    """The variant tag of the arm's runs: the one it names, or for an arm chosen by params the
    one its runs carry (so only such an arm needs a run to know it)."""
    if arm.variant is not None:  # an A/A arm's first look has no run yet
        return arm.variant
    return str(runset.runs.loc[arm_selection(key, arm, runset), "variant"].iloc[0])


def arm_selection(key: str, arm: Arm, runset: RunSet) -> pd.Series:
    """Which of `runset`'s runs are the arm's; `StudyError` naming the arm when none are, or
    when its params match several variants."""
    runs = runset.runs
    if runs.empty:
        raise StudyError(f"arms.{key}: no runs in {arm.experiment} ({runset.selection})")
    if arm.variant is not None:
        mine = runs["variant"] == arm.variant
    else:
        mine = pd.Series(True, index=runs.index)
        for param, value in (arm.where or {}).items():
            if f"params.{param}" not in runs:
                raise StudyError(f"arms.{key}.where: no run of {arm.experiment} has param {param}")
            matches = runs[f"params.{param}"].map(lambda p, v=value: where_matches(p, v))
            mine &= matches.astype(bool)
    if arm.seeds is not None:  # an A/A arm: its reference's runs on other seeds
        mine &= runs["seed"].isin(arm.seeds)
    if not mine.any():
        chosen = f"variant {arm.variant!r}" if arm.variant is not None else f"where {arm.where}"
        raise StudyError(
            f"arms.{key}: no run of {chosen} in {arm.experiment} ({runset.selection}); "
            f"variants there: {', '.join(sorted(runs['variant'].unique())) or '(none)'}"
        )
    variants = sorted(runs.loc[mine, "variant"].unique())
    if len(variants) > 1:
        raise StudyError(f"arms.{key}: where {arm.where} matches variants {', '.join(variants)}")
    return mine


def axis_runset(study: Study, axis: Axis, runsets: Mapping[str, RunSet]) -> RunSet:
    """One `RunSet` of every run of the axis's arms, grouped by the arms' labels."""
    keys = dict.fromkeys(k for c in axis.comparisons for k in (c.against, c.arm))
    experiments = list(dict.fromkeys(study.arms[k].experiment for k in keys))
    runs = pd.concat(
        [arm_runs(k, study.arms[k], runsets[study.arms[k].experiment]) for k in keys],
        ignore_index=True,
    )
    parents = pd.concat([runsets[e].parents for e in experiments], ignore_index=True)
    first = runsets[experiments[0]]
    selection = "; ".join(dict.fromkeys(runsets[e].selection for e in experiments))
    return RunSet(runs, parents, experiments, selection, first.tracking_uri, first.client)


def analyse_axis(
    study: Study,
    axis: Axis,
    runsets: Mapping[str, RunSet],
    tuning: Mapping[str, ArmTuning] | None = None,
) -> AxisResult:
    """The axis's comparison (Holm or the study's correction over its comparisons) and the
    findings, in the manifest's order; with `tuning` (`arm_tuning`), each side's edges and the
    curves of its arms."""
    label = {key: arm.label for key, arm in study.arms.items()}
    options = CompareOptions(
        metric=study.metric,
        baseline=label[axis.comparisons[0].against],
        correction=study.correction,
        references={label[c.arm]: label[c.against] for c in axis.comparisons},
    )
    comparison = compare(axis_runset(study, axis, runsets), options)
    rows = comparison.table.set_index("variant")
    maximize = is_maximized(study.metric)
    tuned = tuning or {}
    findings = []
    for c in axis.comparisons:
        row = rows.loc[label[c.arm]]
        verdict = agreement(c, row, study.metric, study.equivalence_margin, maximize)
        plan = (
            plan_finding(comparison, label[c.arm], label[c.against], c.expect, study)
            if verdict == "too weak to tell"
            else None
        )
        sides = (c.arm, c.against)
        edge = tuple(f"{label[k]}: {w}" for k in sides if k in tuned for w in tuned[k].edges)
        findings.append(
            Finding(
                c,
                label[c.arm],
                label[c.against],
                row,
                verdict,
                study.is_calibration(c),
                edge,
                plan,
            )
        )
    keys: dict[tuple[str, str | None, str], str] = {}  # an A/A arm's runs are its reference's
    for k in (k for c in axis.comparisons for k in (c.against, c.arm) if k in tuned):
        keys.setdefault(study.arms[k].selects(), k)
    curves = {label[k]: tuned[k].curves for k in keys.values() if tuned[k].curves}
    return AxisResult(axis, comparison, findings, curves)


def plan_finding(
    comparison: Comparison, arm: str, against: str, expect: Expectation, study: Study
) -> SeedsPlan | None:
    """The planning statement of `Finding.plan` for the comparison of `arm` with `against`;
    None without a paired design or a spread."""
    finished = comparison.runs[~comparison.runs["run_id"].isin(comparison.problems["run_id"])]
    side = {
        g: Sample.of(runs[comparison.metric], runs["seed"])
        for g, runs in finished.groupby("group")
        if g in (arm, against)
    }
    if len(side) < 2:
        return None
    d = paired_differences(side[arm], side[against])
    if len(d) < 2 or not np.std(d, ddof=1) > 0:
        return None
    equal = expect == "equal"
    return plan_seeds(
        "equivalence" if equal else "difference",
        study.equivalence_margin if equal else study.planned_difference(),
        float(np.std(d, ddof=1)),
        df=len(d) - 1,
        design="paired",
        comparisons=power_comparisons(comparison.n_comparisons, comparison.correction),
    )


def load_sweeps(
    study: Study, tracking_uri: str, loaded: Mapping[str, RunSet] | None = None
) -> dict[str, RunSet]:
    """Every run of each experiment a sensitivity figure reads (a sweep's trials), checked for
    the params and the objective the figure draws (`StudyError` naming the field); an
    experiment already in `loaded` (every run of it) is not read again."""
    sweeps: dict[str, RunSet] = {}
    loaded = loaded or {}
    for i, axis in enumerate(study.axes):
        for k, sensitivity in enumerate(axis.sensitivity):
            where = f"axes[{i}].sensitivity[{k}]"
            try:
                runset = sweeps.get(sensitivity.experiment) or loaded.get(sensitivity.experiment)
                runset = runset or load_runs(tracking_uri, [sensitivity.experiment], all_runs=True)
            except CompareError as e:
                raise StudyError(f"{where}.experiment: {e}") from e
            for name in ("x", "by"):
                param = getattr(sensitivity, name)
                if f"params.{param}" not in runset.runs:
                    raise StudyError(
                        f"{where}.{name}: no run of {sensitivity.experiment} has param {param}"
                    )
            if f"metrics.{study.metric}" not in runset.runs:
                raise StudyError(f"{where}.experiment: no run of it logged {study.metric}")
            sweeps[sensitivity.experiment] = runset
    return sweeps


def analyse(
    study: Study, tracking_uri: str
) -> tuple[list[AxisResult], dict[str, RunSet], dict[str, RunSet]]:
    """Every axis of `study`, from the runs of the experiments its arms name; the sweeps its
    sensitivity figures read; and the evaluation runs it compared (`load_experiments`), for
    the sequential design's standings (`planning.with_standings`) without a second read."""
    every = load_every_run(study, tracking_uri)
    runsets = {name: evaluation_runs(study, name, runset) for name, runset in every.items()}
    tuning = arm_tuning(study, every, runsets)
    axes = [analyse_axis(study, axis, runsets, tuning) for axis in study.axes]
    return axes, load_sweeps(study, tracking_uri, every), runsets
