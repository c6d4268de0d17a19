"""Optuna sweeps over any spec field (`minimind sweep`; docs/architecture.md).

    from minimind.sweep import run_sweep
    exit_code = run_sweep("experiments/lr_sweep.yaml", workers=2)      # or trials=40, best=True

Modules, in the order a sweep uses them:
- `plan`: the spec, the command-line options and the storage URL checked; one study per
  ablation cell, named `<spec>/<variant>`;
- `storage`, `algorithms`, `space`: the Optuna storage, sampler, pruner and `suggest_*` calls;
- `optuna_study`: a study opened against the spec that made it, its MLflow parent run, trial
  counts;
- `worker`: local worker processes looping over trials; `slurm_workers`: the same as Slurm jobs;
  `liveness`: trials of dead workers;
- `objective`: one trial, a training run per seed in a child run `trial-<n>`;
- `report`, `best`: importances, plots, summaries and `best.yaml`;
- `driver`: the command, tying these together.
"""

from minimind.sweep.driver import run_sweep
from minimind.sweep.plan import StudyCell, SweepPlan, plan_sweep, study_name, target_trials

__all__ = [
    "StudyCell",
    "SweepPlan",
    "plan_sweep",
    "run_sweep",
    "study_name",
    "target_trials",
]
