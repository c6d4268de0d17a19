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

from minimind.spec import SpecError, SweepConfig
from minimind.sweep.space import grid_space

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
                return optuna.samplers.GridSampler(grid_space(sweep.params), seed=seed, **options)
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
