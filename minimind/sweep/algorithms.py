"""Samplers and pruners from the `sweep.sampler` and `sweep.pruner` sections.

Construction errors (an unknown option, a missing optional package) are `SpecError`s naming the
section, so `minimind sweep` reports them before anything runs.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable

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


def failed_at_its_point(trial: FrozenTrial) -> bool:
    return trial.state == TrialState.FAIL and bool(trial.user_attrs.get(POINT_FAILED_ATTR))


class GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, except that a point counts as visited only once a trial of it has
    an answer: it finished (COMPLETE or PRUNED) or failed at its point. Optuna's counts every
    ended trial, so the point of an interrupted trial, or of one whose worker died, was never
    trained again; and once the grid was exhausted short of the target, the sampler evaluated an
    already finished point a second time. A point queued again (a retried trial, WAITING) is
    under way, as a RUNNING one is, so that another worker does not take it too."""

    def _get_unvisited_grid_ids(self, study: Study) -> list[int]:
        answered: set[int] = set()
        under_way: set[int] = set()
        for trial in study._storage.get_all_trials(study._study_id, deepcopy=False):
            grid_id = trial.system_attrs.get("grid_id")
            space = trial.system_attrs.get("search_space")
            if grid_id is None or space is None or not self._same_search_space(space):
                continue
            if trial.state in (TrialState.COMPLETE, TrialState.PRUNED) or failed_at_its_point(
                trial
            ):
                answered.add(grid_id)
            elif trial.state in (TrialState.RUNNING, TrialState.WAITING):
                under_way.add(grid_id)
        unanswered = set(range(len(self._all_grids))) - answered
        # Every unanswered point under way: Optuna's choice among them (or, with none, among all
        # points, with its warning), as for a race between workers.
        return sorted(unanswered - under_way) or sorted(unanswered)


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
