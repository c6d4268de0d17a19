"""A study's summary: counts, best trial(s), parameter importances and plots.

`write_report` fills `results/generated/<study>/` with `trials.csv`, `summary.json` and PNG plots
(optimization history and parallel coordinates per objective, parameter importances, the Pareto
front of a multi-objective study, the intermediate values of a pruned one); `log_report` puts the
same on the study's MLflow parent run: metrics `best/<metric>` and `importance/<param>` (step =
finished trials, so re-runs extend them), tags `best_trial` and `best.<param>`, the files under
`summary/`.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial

from minimind.spec import SweepConfig
from minimind.sweep.algorithms import is_pruning
from minimind.sweep.best import best_trial
from minimind.sweep.optuna_study import Progress, progress

if TYPE_CHECKING:
    from minimind.tracking import RunHandle

PLOT_SIZE = (10, 6)


@dataclass
class StudyReport:
    study: str
    progress: Progress
    best: FrozenTrial | None
    metrics: list[str]
    importances: dict[str, dict[str, float]] = field(
        default_factory=dict
    )  # metric -> param -> share
    files: list[Path] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        best = None
        if self.best is not None:
            best = {
                "trial": self.best.number,
                "values": dict(zip(self.metrics, self.best.values, strict=True)),
                "params": self.best.params,
            }
        counts = self.progress
        return {
            "study": self.study,
            "trials": {
                "finished": counts.finished,
                "complete": counts.complete,
                "pruned": counts.pruned,
                "failed": counts.failed,
            },
            "best": best,
            "importances": self.importances,
        }


def write_report(study: optuna.Study, sweep: SweepConfig, directory: Path) -> StudyReport:
    """Summarize `study` and write its files into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    report = StudyReport(study.study_name, progress(study), best_trial(study, sweep), sweep.metrics)
    targets = _targets(sweep)
    if report.progress.complete >= 2:
        for metric, target in _lower_is_better(sweep).items():
            report.importances[metric] = _importances(study, target)
    trials = directory / "trials.csv"
    study.trials_dataframe().to_csv(trials, index=False)
    report.files.append(trials)
    summary = directory / "summary.json"
    summary.write_text(json.dumps(report.summary(), indent=2, default=str) + "\n")
    report.files.append(summary)
    if report.progress.complete:
        report.files += _plots(study, sweep, targets, report, directory)
    return report


def log_report(parent: RunHandle, report: StudyReport) -> None:
    step = report.progress.finished
    metrics: dict[str, float] = {
        "study/finished": report.progress.finished,
        "study/pruned": report.progress.pruned,
        "study/failed": report.progress.failed,
    }
    if report.best is not None:
        metrics |= {
            f"best/{metric}": value
            for metric, value in zip(report.metrics, report.best.values, strict=True)
        }
        tags = {f"best.{key}": value for key, value in report.best.params.items()}
        parent.set_tags({"best_trial": report.best.number, **tags})
    for metric, shares in report.importances.items():
        prefix = "importance/" if len(report.importances) == 1 else f"importance/{metric}/"
        metrics |= {prefix + param: share for param, share in shares.items()}
    parent.log_metrics(metrics, step)
    for path in report.files:
        parent.log_artifact(path, "summary")


def describe(report: StudyReport) -> str:
    lines = [f"study {report.study}: {report.progress}"]
    if report.best is not None:
        values = ", ".join(
            f"{m} {v:.4f}" for m, v in zip(report.metrics, report.best.values, strict=True)
        )
        lines.append(f"  best trial {report.best.number}: {values}")
        lines += [f"    {key} = {_show(value)}" for key, value in report.best.params.items()]
    for metric, shares in report.importances.items():
        ranked = ", ".join(f"{param} {share:.2f}" for param, share in shares.items())
        lines.append(f"  importance for {metric}: {ranked}")
    return "\n".join(lines)


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


Target = Callable[[FrozenTrial], float]


def _objective_value(trial: FrozenTrial, index: int, sign: int = 1) -> float:
    return sign * trial.values[index]


def _targets(sweep: SweepConfig) -> dict[str, Target]:
    """The value of each objective in a trial (Optuna's plots need one for multi-objective)."""
    return {metric: partial(_objective_value, index=i) for i, metric in enumerate(sweep.metrics)}


def _lower_is_better(sweep: SweepConfig) -> dict[str, Target]:
    """Each objective signed so that lower is better, as PED-ANOVA's `target` must be."""
    return {
        metric: partial(_objective_value, index=i, sign=1 if direction == "minimize" else -1)
        for i, (metric, direction) in enumerate(zip(sweep.metrics, sweep.directions, strict=True))
    }


def _importances(study: optuna.Study, target: Target) -> dict[str, float]:
    """How much each param matters for reaching good values of `target` (PED-ANOVA, shares
    summing to 1); empty when it cannot be told, e.g. every complete trial has the same value."""
    try:
        with warnings.catch_warnings():  # notes on `target` and on too few trials
            warnings.simplefilter("ignore", UserWarning)
            shares = optuna.importance.get_param_importances(study, target=target)
    except (RuntimeError, ValueError):
        return {}
    return {key: float(value) for key, value in shares.items() if math.isfinite(value)}


def _plots(
    study: optuna.Study,
    sweep: SweepConfig,
    targets: dict[str, Target],
    report: StudyReport,
    directory: Path,
) -> list[Path]:
    from optuna.visualization import matplotlib as plots

    multi = sweep.is_multi_objective
    signed = _lower_is_better(sweep)
    figures: dict[str, Callable[[], Any]] = {}
    for metric, target in targets.items():
        suffix = f"-{metric.replace('/', '_')}" if multi else ""
        figures[f"history{suffix}.png"] = partial(
            plots.plot_optimization_history, study, target=target, target_name=metric
        )
        figures[f"parallel_coordinate{suffix}.png"] = partial(
            plots.plot_parallel_coordinate, study, target=target, target_name=metric
        )
        if report.importances.get(metric):
            figures[f"importances{suffix}.png"] = partial(
                plots.plot_param_importances, study, target=signed[metric], target_name=metric
            )
    if multi:
        figures["pareto_front.png"] = lambda: plots.plot_pareto_front(
            study, target_names=sweep.metrics
        )
    if is_pruning(sweep):
        figures["intermediate_values.png"] = lambda: plots.plot_intermediate_values(study)
    return [_save(draw, directory / name) for name, draw in figures.items()]


def _save(draw: Callable[[], Any], path: Path) -> Path:
    import matplotlib.pyplot as plt
    import numpy as np

    with warnings.catch_warnings():  # "experimental" plots; axis-range and target notes
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", UserWarning)
        axes = draw()
    figure = np.ravel(axes)[0].figure
    figure.set_size_inches(*PLOT_SIZE)
    figure.savefig(path, bbox_inches="tight")
    plt.close(figure)
    return path
