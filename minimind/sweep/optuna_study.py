"""Opening a study and its MLflow parent run, and counting its trials.

A study remembers (user attributes) the hash of the ablation cell's spec that created it (its
`cell_hash`; studies of earlier versions stored it as `spec_hash`, still read) and its
objective metrics: resuming it from a spec that
trains differently would mix incomparable trials, so that is an error. It also remembers its MLflow parent run, which every later
invocation reopens, so one study is one parent run with one child per trial.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from minimind.record import PARENT_ROLE, ROLE_TAG, STUDY_TAG, study_parent_tags
from minimind.spec import SpecError, SweepConfig, dump_spec, flatten
from minimind.sweep.algorithms import GridSampler, failed_at_its_point
from minimind.sweep.plan import StudyCell, searches_grid
from minimind.sweep.space import choices, grid_space

if TYPE_CHECKING:
    from minimind.tracking import RunHandle, Tracker

CELL_HASH_ATTR = "cell_hash"
LEGACY_CELL_HASH_ATTR = "spec_hash"  # where studies of earlier versions stored it
METRICS_ATTR = "objective"
PARENT_ATTR = "mlflow_parent_run_id"


@dataclass(frozen=True)
class Progress:
    """Trial counts by state. `finished` (COMPLETE + PRUNED) is what `sweep.trials` counts: a
    pruned trial was a real, informative evaluation; a failed one is not, and is replaced. A
    grid counts its points instead (`counted`); `failed_at_point`, among `failed`: the trials
    that failed of their own values (a non-finite loss), which fail again if trained again."""

    complete: int
    pruned: int
    failed: int
    running: int
    waiting: int
    failed_at_point: int = 0

    @property
    def finished(self) -> int:
        return self.complete + self.pruned

    def __str__(self) -> str:
        text = f"{self.finished} finished ({self.complete} complete, {self.pruned} pruned)"
        text += f", {self.failed} failed"
        if self.failed_at_point:
            text += f" ({self.failed_at_point} of its values)"
        if self.running:
            text += f", {self.running} running"
        if self.waiting:
            text += f", {self.waiting} waiting"
        return text


def progress(study: optuna.Study) -> Progress:
    trials = study.get_trials(deepcopy=False)
    states = [t.state for t in trials]
    return Progress(
        complete=states.count(TrialState.COMPLETE),
        pruned=states.count(TrialState.PRUNED),
        failed=states.count(TrialState.FAIL),
        running=states.count(TrialState.RUNNING),
        waiting=states.count(TrialState.WAITING),
        failed_at_point=sum(map(failed_at_its_point, trials)),
    )


def counted(study: optuna.Study, sweep: SweepConfig) -> int:
    """The trials that count toward the target (`plan.target_trials`): the finished ones; on a
    grid, the grid's points answered (`algorithms.GridSampler.answered`, by a trial of this grid
    or of an earlier, smaller one); by brute force, also the points that failed of their own
    values, which there is no other point to replace."""
    if sweep.sampler.name == "grid":
        return GridSampler(grid_space(sweep.params)).answered(study)
    counts = progress(study)
    return counts.finished + (counts.failed_at_point if searches_grid(sweep) else 0)


def open_study(
    storage: optuna.storages.BaseStorage,
    name: str,
    sweep: SweepConfig,
    cell_hash: str,
    *,
    pruner: optuna.pruners.BasePruner | None = None,
    create: bool = True,
) -> optuna.Study:
    """The study `name` of an ablation cell whose spec hashes to `cell_hash`, created on first
    use; `SpecError` if it exists but was made by a spec that trains differently or optimizes
    other metrics. With `create=False` a missing study is a `KeyError`."""
    if create:
        study = optuna.create_study(
            storage=storage,
            study_name=name,
            directions=sweep.directions,
            pruner=pruner,
            load_if_exists=True,
        )
    else:
        try:
            study = optuna.load_study(study_name=name, storage=storage, pruner=pruner)
        except KeyError:
            raise KeyError(f"no study {name!r} in {sweep.storage}") from None
    _check_matches(study, name, sweep, cell_hash, reading=not create)
    return study


def _check_matches(
    study: optuna.Study, name: str, sweep: SweepConfig, cell_hash: str, *, reading: bool
) -> None:
    """`reading`: the study is only read (`--best`), whose spec must be the sweep's, overrides
    and all, so the hint is to repeat them rather than to start another study."""
    attrs = study.user_attrs
    stored = attrs.get(CELL_HASH_ATTR, attrs.get(LEGACY_CELL_HASH_ATTR))
    if stored is None:
        study.set_user_attr(CELL_HASH_ATTR, cell_hash)
        study.set_user_attr(METRICS_ATTR, sweep.metrics)
        attrs, stored = study.user_attrs, cell_hash
    hint = (
        "repeat the -o overrides the sweep ran with (minimind sweep SPEC -o KEY=VALUE ... --best)"
        if reading
        else "set another name (-o name=...) to start a new study"
    )
    if stored != cell_hash:
        raise SpecError(
            "name",
            f"study {name!r} in {sweep.storage} was made from a spec that trains "
            f"differently (cell_hash {stored}, this one {cell_hash}); {hint}",
        )
    _check_choices(study, name, sweep, hint)
    directions = [d.name.lower() for d in study.directions]
    if attrs.get(METRICS_ATTR) != sweep.metrics or directions != sweep.directions:
        raise SpecError(
            "sweep.objective",
            f"study {name!r} in {sweep.storage} optimizes "
            f"{_objectives(attrs.get(METRICS_ATTR), directions)}, not "
            f"{_objectives(sweep.metrics, sweep.directions)}; {hint}",
        )


def _check_choices(study: optuna.Study, name: str, sweep: SweepConfig, hint: str) -> None:
    """Optuna fixes a categorical param's choices for a study's life (its storage refuses a
    trial of other choices): a spec that changed them is a `SpecError`, before any trial fails.
    A range's ends may change, so a grid of a range grows in place."""
    recorded: dict[str, list[Any]] = {}
    for trial in study.get_trials(deepcopy=False):
        for key, dist in trial.distributions.items():
            if isinstance(dist, CategoricalDistribution):
                recorded.setdefault(key, list(dist.choices))
    for key, param in sweep.params.items():
        if param.type == "categorical" and key in recorded and recorded[key] != choices(param):
            raise SpecError(
                f"sweep.params.{key}",
                f"study {name!r} in {sweep.storage} tried the choices {recorded[key]}; Optuna "
                f"keeps a categorical's choices for a study's life: give those, or {hint}",
            )


def _objectives(metrics: Sequence[str] | None, directions: Sequence[str]) -> str:
    return ", ".join(
        f"{d} {m}" for m, d in zip(metrics or ["?"] * len(directions), directions, strict=False)
    )


def open_parent(
    tracker: Tracker, study: optuna.Study, cell: StudyCell, plan_hash: str
) -> RunHandle:
    """The study's MLflow parent run: reopened when the study names one in this experiment,
    else created with tags `study`, `variant` and `plan_hash` (the whole spec's, as its trials'
    runs and `minimind run` have it), and the cell's spec as params and file."""
    known = study.user_attrs.get(PARENT_ATTR)
    if known:
        runs = tracker.find_runs({ROLE_TAG: PARENT_ROLE, STUDY_TAG: cell.name})
        if any(run.info.run_id == known for run in runs):
            return tracker.resume_run(known)
    parent = tracker.start_parent(
        cell.name, study_parent_tags(cell.name, cell.variant.name, plan_hash)
    )
    parent.log_params(flatten(cell.spec))
    parent.log_text(dump_spec(cell.spec), "spec.yaml")
    study.set_user_attr(PARENT_ATTR, parent.run_id)
    return parent
