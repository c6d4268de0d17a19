"""The best trial of a study, and `best.yaml`: the spec with the best values filled in.

A multi-objective study has a Pareto front rather than one best trial; `best.yaml` takes the
front's trial that is best on the first objective (all of the front is printed). For a spec with
`ablate`, each cell has its own best values, and `best.yaml` becomes one paired ablation: a group
axis `tuned` whose values set each cell's ablated keys together with its tuned values, so that
`minimind run best.yaml` compares every variant at its own best settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from minimind.foundations.atomic_file import atomic_write_text
from minimind.spec import Spec, SweepConfig, dump_spec, validate_spec, with_values
from minimind.sweep.plan import SweepPlan

TUNED_AXIS = "tuned"


def best_trial(study: optuna.Study, sweep: SweepConfig) -> FrozenTrial | None:
    """The best COMPLETE trial, or None before the first one."""
    front = pareto_front(study)
    if not front:
        return None
    sign = 1 if sweep.directions[0] == "minimize" else -1
    return min(front, key=lambda t: (sign * t.values[0], t.number))


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """The trials no other COMPLETE trial beats on every objective (the best trial(s) for a
    single objective); empty before the first COMPLETE trial."""
    return sorted(study.best_trials, key=lambda t: t.number)


def best_spec(plan: SweepPlan, best: Mapping[str, FrozenTrial]) -> Spec:
    """The runnable spec: `best` maps study names to their best trials; cells without one are
    left out of a `tuned` axis."""
    spec = plan.spec
    tree = {
        **spec.tree(),
        "name": f"{spec.name}-best",
        "description": _description(plan, best),
        "sweep": None,
    }
    if not spec.ablate:
        (cell,) = plan.cells
        return with_values(validate_spec(tree), best[cell.name].params)
    tree["ablate"] = {
        TUNED_AXIS: [
            {**cell.variant.assignments, **best[cell.name].params}
            for cell in plan.cells
            if cell.name in best
        ]
    }
    return validate_spec(tree)


def write_best(plan: SweepPlan, best: Mapping[str, FrozenTrial], reports_dir: Path) -> Path:
    """Write `best_spec` to `<reports_dir>/<spec>/best.yaml` (atomically: a link planted at that
    path is replaced, never followed); its path. Its URIs carry no password (`dump_spec`)."""
    path = reports_dir / plan.spec.name / "best.yaml"
    atomic_write_text(path, dump_spec(best_spec(plan, best)))
    return path


def describe_front(study: optuna.Study, sweep: SweepConfig) -> str:
    """The Pareto front of a multi-objective study, one trial per line."""
    lines = [f"  Pareto front ({' vs '.join(f'{d} {m}' for m, d in _objectives(sweep))}):"]
    for trial in pareto_front(study):
        values = ", ".join(f"{m} {v:.4g}" for m, v in zip(sweep.metrics, trial.values, strict=True))
        params = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial.params.items()
        )
        lines.append(f"    trial {trial.number}: {values}  [{params}]")
    return "\n".join(lines)


def _objectives(sweep: SweepConfig) -> list[tuple[str, str]]:
    return list(zip(sweep.metrics, sweep.directions, strict=True))


def _description(plan: SweepPlan, best: Mapping[str, FrozenTrial]) -> str:
    trials = ", ".join(f"{name} trial {trial.number}" for name, trial in best.items())
    return f"{plan.spec.name} at the best values found by `minimind sweep` ({trials})."
