"""Samplers and pruners from the `sweep.sampler` and `sweep.pruner` sections.

Construction errors (an unknown option, a missing optional package) are `SpecError`s naming the
section, so `minimind sweep` reports them before anything runs.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from minimind.spec import SpecError, SweepConfig
from minimind.sweep.space import grid_space

# A trial's user attribute: it failed of its own values (a non-finite loss, an invalid
# combination), which trained again with the same seeds fail again; unlike an interrupted trial
# or one whose worker died.
POINT_FAILED_ATTR = "failed_at_its_point"
GRID_POINT_ATTR = "grid_point"  # a trial's system attribute: its point's values, in name order


def failed_at_its_point(trial: FrozenTrial) -> bool:
    return trial.state == TrialState.FAIL and bool(trial.user_attrs.get(POINT_FAILED_ATTR))


class GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, with a grid's points known by their values, each trained until it
    has an answer.

    - A point is answered once a trial of it finished (COMPLETE or PRUNED) or failed at its
      point. Optuna's counts every ended trial, so the point of an interrupted trial, or of one
      whose worker died, was never trained again; once the grid was exhausted short of the
      target it trained a finished point a second time.
    - Optuna's knows a trial's point by its index in the grid as the sampler's seed shuffled it,
      and a sweep seeds each worker and each invocation apart (`worker_seed`): a resumed sweep
      read its earlier trials' points wrongly. Here a point is its values (`GRID_POINT_ATTR` while
      the trial runs, its params after), so that a grid of a range can also grow in place: a
      spec that moves an end keeps the study's trials and trains only the new points.
    - A point whose trial runs, or is queued again (a retried trial, WAITING), is under way:
      another worker takes another point while there is one.
    """

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        # Optuna's gives trial n the grid's n-th point while n is below the grid's size, answered
        # or not; here every trial takes a point without an answer.
        if "grid_id" in trial.system_attrs or "fixed_params" in trial.system_attrs:
            return  # a retried trial (its params are set) or an enqueued one
        choices = self._get_unvisited_grid_ids(study) or list(range(len(self._all_grids)))
        grid_id = int(self._rng.rng.choice(choices))
        storage = study._storage
        storage.set_trial_system_attr(trial._trial_id, "search_space", self._search_space)
        storage.set_trial_system_attr(trial._trial_id, "grid_id", grid_id)
        storage.set_trial_system_attr(
            trial._trial_id, GRID_POINT_ATTR, list(self._all_grids[grid_id])
        )

    def answered(self, study: Study) -> int:
        """How many points of this grid a trial answered (of this grid or of an earlier one)."""
        return len(self._points(study)[0])

    def _get_unvisited_grid_ids(self, study: Study) -> list[int]:
        answered, under_way = self._points(study)
        unanswered = set(range(len(self._all_grids))) - answered
        # Every unanswered point under way: Optuna's choice among them (with none, among all
        # points, after its warning in `after_trial`), as for a race between workers.
        return sorted(unanswered - under_way) or sorted(unanswered)

    def _points(self, study: Study) -> tuple[set[int], set[int]]:
        """The indices of this grid's points answered, and of those under way."""
        index = {tuple(values): i for i, values in enumerate(self._all_grids)}
        answered: set[int] = set()
        under_way: set[int] = set()
        for trial in study._storage.get_all_trials(study._study_id, deepcopy=False):
            values: list[Any] | None
            if all(name in trial.params for name in self._param_names):
                values = [trial.params[name] for name in self._param_names]
            else:  # a running trial that has not suggested its values yet
                values = trial.system_attrs.get(GRID_POINT_ATTR)
            point = None if values is None else index.get(tuple(values))
            if point is None:
                continue
            if trial.state in (TrialState.COMPLETE, TrialState.PRUNED) or failed_at_its_point(
                trial
            ):
                answered.add(point)
            elif trial.state in (TrialState.RUNNING, TrialState.WAITING):
                under_way.add(point)
        return answered, under_way


_SAMPLERS: dict[str, Callable[..., optuna.samplers.BaseSampler]] = {
    "tpe": optuna.samplers.TPESampler,
    "random": optuna.samplers.RandomSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "nsga2": optuna.samplers.NSGAIISampler,
    "bruteforce": optuna.samplers.BruteForceSampler,
}

_PRUNERS: dict[str, Callable[..., optuna.pruners.BasePruner]] = {
    "median": optuna.pruners.MedianPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
    "none": optuna.pruners.NopPruner,
}


def build_sampler(sweep: SweepConfig, seed: int | None) -> optuna.samplers.BaseSampler:
    """The configured sampler, seeded with `seed` (the caller derives it from `sampler.seed`, so
    that parallel workers and later invocations do not replay the same draws)."""
    name, options = sweep.sampler.name, dict(sweep.sampler.options)
    if name == "cmaes" and importlib.util.find_spec("cmaes") is None:
        raise SpecError("sweep.sampler", "cmaes needs the 'cmaes' package: pip install cmaes")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            if name == "grid":
                return GridSampler(grid_space(sweep.params), seed=seed, **options)
            return _SAMPLERS[name](seed=seed, **options)
        except (TypeError, ValueError) as err:
            raise SpecError("sweep.sampler.options", f"{name}: {err}") from None


def build_pruner(sweep: SweepConfig) -> optuna.pruners.BasePruner:
    name, options = sweep.pruner.name, sweep.pruner.options
    try:
        return _PRUNERS[name](**options)
    except (TypeError, ValueError) as err:
        raise SpecError("sweep.pruner.options", f"{name}: {err}") from None


def is_pruning(sweep: SweepConfig) -> bool:
    """Whether trials report intermediate values (a single objective and a real pruner)."""
    return not sweep.is_multi_objective and sweep.pruner.name != "none"


def worker_seed(base: int | None, worker: int, trials_before: int) -> int | None:
    """The sampler seed of one worker in one invocation: `base` for the first worker of a new
    study, else a seed derived from all three, because equal seeds in two workers (or in a re-run
    of the study) would draw the same random start-up points again."""
    if base is None or (worker == 0 and trials_before == 0):
        return base
    return int(np.random.SeedSequence([base % 2**32, worker, trials_before]).generate_state(1)[0])
