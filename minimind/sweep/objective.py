"""One trial: suggested values -> a spec -> a training run per seed -> the objective value(s).

Each seed trains in its own MLflow child run of the study's parent run, named `trial-<n>` (or
`trial-<n>/seed<k>` with `sweep.seeds_per_trial` > 1), by the path of `minimind run`'s children
(`minimind.run.child_run`, with the same artifacts); what a trial adds are its `TrialHooks`. Its params are the resolved spec with the
suggested values in it (flattened, as `minimind run` logs them), its tags those of a `run` child
plus `trial_number`, `study` and `state` (`complete`, `pruned` or `failed`); see
`minimind.record`.

A metric's logged values become one number by `sweep.reduce`; the trial's value is the median over
its seeds (`trial_values`). Pruning watches the first seed: the first objective, reduced over the evaluations so
far, is reported at each step it is logged, and a pruned trial's run ends KILLED. A run that fails
(a non-finite loss, an invalid combination of values, a metric that is never logged) makes the
trial FAIL with a `failure_reason` user attribute; the sweep goes on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import optuna

from minimind.data import DataConfig, PreparedData, prepare_data
from minimind.record import TRIAL_STATE_TAG, curve_metric, trial_run_name, trial_tags
from minimind.run.child_run import ChildHooks, ChildRun, train_child
from minimind.run.plan import data_key
from minimind.spec import ReduceConfig, Spec, SpecError, SweepConfig, with_values
from minimind.sweep.algorithms import POINT_FAILED_ATTR, is_pruning
from minimind.sweep.liveness import record_worker
from minimind.sweep.space import suggest
from minimind.tracking.lifecycle import describe_exit
from minimind.training.trainer import MetricSink, TrainOutcome

if TYPE_CHECKING:
    from minimind.tracking import RunHandle, Tracker
    from minimind.tracking.rank_zero import NullRunHandle

FAILURE_ATTR = "failure_reason"  # the Optuna trial's user attribute


def reduce_values(values: Sequence[float], reduce: ReduceConfig) -> float:
    """The logged values of one metric (in step order) as one number."""
    if not values:
        raise ValueError("no values to reduce")
    if reduce.name == "last":
        return values[-1]
    if reduce.name == "min":
        return min(values)
    if reduce.name == "max":
        return max(values)
    return statistics.fmean(values[-reduce.k :])


class TrialSink:
    """What a trial's `Trainer` logs to: forwards every point to the MLflow run, keeps the
    objective metrics' values and, given a trial, reports the first objective for pruning (its
    periodic estimate, `record.curve_metric`, for the exact `val/*` logged only at the end).

    The evaluation at `final_step` is reported but never pruned: the run has spent its budget,
    and its value is worth more to the sampler than a PRUNED mark."""

    def __init__(
        self,
        run: RunHandle | NullRunHandle,
        sweep: SweepConfig,
        trial: optuna.Trial | None = None,
        final_step: int | None = None,
    ) -> None:
        self.run = run
        self.sweep = sweep
        self.trial = trial
        self.final_step = final_step
        # The exact val/* metrics are logged once, at the end: prune on their periodic estimate.
        self.watched = curve_metric(sweep.metrics[0])
        self.history: dict[str, list[float]] = {
            metric: [] for metric in dict.fromkeys([*sweep.metrics, self.watched])
        }

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log_metrics(metrics, step)
        for metric, values in self.history.items():
            if metric in metrics:
                values.append(float(metrics[metric]))
        watched = self.watched
        if self.trial is not None and watched in metrics:
            value = reduce_values(self.history[watched], self.sweep.reduce)
            self.trial.report(value, step)
            if step != self.final_step and self.trial.should_prune():
                raise optuna.TrialPruned(f"pruned at step {step} with {watched} {value:.4f}")

    def flush(self, timeout: float | None = None) -> bool:
        return self.run.flush(timeout)

    def values(self) -> list[float]:
        """The reduced value of each objective; ValueError naming a metric never logged."""
        missing = [metric for metric in self.sweep.metrics if not self.history[metric]]
        if missing:
            raise ValueError(f"{', '.join(missing)} was never logged by the run")
        return [reduce_values(self.history[m], self.sweep.reduce) for m in self.sweep.metrics]


@dataclass
class TrialContext:
    """What every trial of one study shares: the ablation cell's spec (with `sweep`), names, the
    tracker, the parent run and the prepared data."""

    spec: Spec
    variant: str
    study: str
    plan_hash: str  # of the whole spec: the children's `plan_hash` tag, as `run` tags them
    tracker: Tracker
    parent_run_id: str
    data: dict[str, PreparedData] = field(default_factory=dict)  # by `data` section

    def data_for(self, cfg: DataConfig) -> PreparedData:
        """The prepared data of a trial's `data` section, prepared here on first use: the
        cell's (handed in by a worker in the sweep's own process; a spawned worker prepares it
        again, from the disk cache `minimind sweep` filled before the workers started) or a
        searched one (e.g. the tokenizer's size); the cache's atomic writes make that safe in
        parallel."""
        key = data_key(cfg)
        if key not in self.data:
            self.data[key] = prepare_data(cfg)
        return self.data[key]

    @property
    def sweep(self) -> SweepConfig:
        return self.spec.sweep_section()

    @property
    def seeds(self) -> list[int]:
        return self.spec.seeds[: self.sweep.seeds_per_trial]


def trial_values(per_seed: Sequence[Sequence[float]]) -> list[float]:
    """A trial's value of each objective: the median over its seeds (per_seed: [seeds,
    objectives]). The median, not the mean: a seed that stalls at a point (post-norm stalled
    on 2 of 12 evaluation seeds at an lr one tuning seed chose) moves a mean of 3 tuning seeds
    by a third of its excess, and the median not at all, so the sweep picks a point that
    trains on most seeds; with 1 or 2 seeds it is the mean."""
    return [statistics.median(column) for column in zip(*per_seed, strict=True)]


class TrialObjective:
    """The function `study.optimize` calls: returns the value (or values, multi-objective), NaN
    for a failed trial, or raises `optuna.TrialPruned`."""

    def __init__(self, ctx: TrialContext) -> None:
        self.ctx = ctx

    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        ctx = self.ctx
        run_ids: list[str] = []
        record_worker(trial, ctx.tracker.uri, run_ids)
        values = suggest(trial, ctx.sweep.params)
        try:
            spec = with_values(ctx.spec, values)
        except SpecError as err:
            return self._fail(trial, f"invalid combination of values: {err}")
        per_seed: list[list[float]] = []
        for i, seed in enumerate(ctx.seeds):
            prune = i == 0 and is_pruning(ctx.sweep)
            try:
                result = self._run_seed(trial, spec, seed, prune, run_ids)
            except optuna.TrialPruned:
                raise
            except BaseException as exc:  # Optuna marks the trial FAIL (and re-raises Ctrl-C)
                trial.set_user_attr(FAILURE_ATTR, describe_exit(exc)[1])
                raise
            if isinstance(result, str):
                return self._fail(trial, result)
            per_seed.append(result)
        medians = trial_values(per_seed)
        return medians if ctx.sweep.is_multi_objective else medians[0]

    def _run_seed(
        self, trial: optuna.Trial, spec: Spec, seed: int, prune: bool, run_ids: list[str]
    ) -> list[float] | str:
        """Train one seed in its child run: its objective values, or why it failed."""
        ctx = self.ctx
        child = ChildRun(
            ctx.tracker,
            ctx.parent_run_id,
            trial_run_name(trial.number, seed, len(ctx.seeds)),
            ctx.plan_hash,
            ctx.variant,
            spec,
            seed,
            ctx.data_for(spec.data),
            tags=trial_tags(ctx.study, trial.number),
        )
        hooks = TrialHooks(trial, prune, ctx, run_ids, spec.train.planned_steps)
        train_child(child, hooks)
        assert hooks.result is not None  # set by `ended` whenever `train_child` returns
        return hooks.result

    def _fail(self, trial: optuna.Trial, reason: str) -> float | list[float]:
        """Record why and return NaN, which Optuna stores as a FAIL trial without a traceback.
        The failure is the point's: the same values and seeds fail again."""
        trial.set_user_attr(FAILURE_ATTR, reason)
        trial.set_user_attr(POINT_FAILED_ATTR, True)
        n = len(self.ctx.sweep.metrics)
        return [math.nan] * n if n > 1 else math.nan


class TrialHooks(ChildHooks):
    """A trial's additions to `minimind.run.child_run`: the worker's record of its runs, the
    `TrialSink` (pruning on the first seed), the `state` tag, and the objective values (or why
    there are none) as `result`."""

    def __init__(
        self,
        trial: optuna.Trial,
        prune: bool,
        ctx: TrialContext,
        run_ids: list[str],
        final_step: int | None,
    ) -> None:
        self.trial = trial
        self.prune = prune  # False: a later seed, or a sweep without a pruner
        self.ctx = ctx
        self.run_ids = run_ids
        self.final_step = final_step
        self.trial_sink: TrialSink | None = None
        self.result: list[float] | str | None = None

    def started(self, run: RunHandle | NullRunHandle) -> None:
        self.run_ids.append(run.run_id)
        record_worker(self.trial, self.ctx.tracker.uri, self.run_ids)

    def sink(self, run: RunHandle | NullRunHandle) -> MetricSink:
        trial = self.trial if self.prune else None
        self.trial_sink = TrialSink(run, self.ctx.sweep, trial, self.final_step)
        return self.trial_sink

    def interrupted(self, run: RunHandle | NullRunHandle, exc: BaseException) -> None:
        if isinstance(exc, optuna.TrialPruned):
            run.set_tags({TRIAL_STATE_TAG: "pruned"})
            run.end("KILLED", str(exc))
        else:  # the handle ends the run FAILED (or KILLED on Ctrl-C)
            run.set_tags({TRIAL_STATE_TAG: "failed"})

    def ended(self, run: RunHandle | NullRunHandle, outcome: TrainOutcome) -> None:
        if outcome.status != "FINISHED":  # the path ends the run FAILED with the reason
            run.set_tags({TRIAL_STATE_TAG: "failed"})
            self.result = outcome.failure_reason or "the run failed"
            return
        assert self.trial_sink is not None  # the trainer ran
        try:
            values = self.trial_sink.values()
        except ValueError as err:
            run.set_tags({TRIAL_STATE_TAG: "failed"})
            run.end("FAILED", str(err))
            self.result = str(err)
            return
        metrics = self.ctx.sweep.metrics
        run.log_metrics(
            {f"trial/{m}": v for m, v in zip(metrics, values, strict=True)}, outcome.step
        )
        run.set_tags({TRIAL_STATE_TAG: "complete"})
        self.result = values
