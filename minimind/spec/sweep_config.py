"""The `sweep:` section of an experiment spec: an Optuna study over dotted spec keys.

Only `minimind sweep` reads it. Whether each searched key fits the rest of the spec (the key
exists, its ends and choices validate) is checked by `Spec`, which sees the whole spec.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from minimind.foundations.strict_config import field_error
from minimind.record import RUN_METRICS, is_maximized, is_run_metric
from minimind.spec.errors import did_you_mean, show
from minimind.spec.sections import Section

# Metrics a trial can be scored on: those a training run logs.
OBJECTIVE_METRICS: tuple[str, ...] = RUN_METRICS

DEFAULT_OBJECTIVE = "val/bpb"

Direction = Literal["minimize", "maximize"]
Scalar = bool | int | float | str | None  # what Optuna's categorical distribution stores safely

_DB_URL = re.compile(r"[A-Za-z][\w+.-]*://.*")


def natural_direction(metric: str) -> Direction:
    """The direction in which `metric` gets better, as the run record knows it."""
    return "maximize" if is_maximized(metric) else "minimize"


def _contradiction(metric: Any, direction: Any) -> str | None:
    """Why `direction` is wrong for `metric`, or None (also for an unknown metric or direction,
    which their own fields reject)."""
    if not is_run_metric(metric) or direction not in ("minimize", "maximize"):
        return None
    natural = natural_direction(metric)
    if direction == natural:
        return None
    better = "higher" if natural == "maximize" else "lower"
    return (
        f"{metric} is better {better}: its direction is {natural}, not {direction} "
        f"(leave direction out to take it from the metric)"
    )


class Objective(Section):
    """A metric a trial is scored on and its direction, which is the metric's own
    (`record.is_maximized`): given, it must agree; left out, it is taken from the metric."""

    metric: str
    direction: Direction

    @model_validator(mode="before")
    @classmethod
    def _metric_direction(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("metric"), str):
            return data
        metric = data["metric"]
        if data.get("direction") is None:
            return {**data, "direction": natural_direction(metric)}
        problem = _contradiction(metric, data["direction"])
        if problem:
            field_error(("direction",), problem)
        return data

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str) -> str:
        if not is_run_metric(metric):
            raise ValueError(
                f"unknown metric {metric!r}; choices: {', '.join(OBJECTIVE_METRICS)}, "
                "val/<eval set>/loss, val/<eval set>/bpb, val/bpb_macro"
                f"{did_you_mean(metric, OBJECTIVE_METRICS)}"
            )
        return metric


class ReduceConfig(Section):
    """How a trial's logged metric becomes its value: the `last` point, the `min` or `max` over
    evaluations, or the mean of the last `k` points (`mean_last_k`)."""

    name: Literal["last", "min", "max", "mean_last_k"] = "last"
    k: int = Field(default=3, gt=0)


class SamplerConfig(Section):
    name: Literal["tpe", "random", "grid", "cmaes", "nsga2", "bruteforce"] = "tpe"
    seed: int | None = 0
    options: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of the sampler


class PrunerConfig(Section):
    name: Literal["median", "hyperband", "successive_halving", "none"] = "median"
    options: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of the pruner


class ParamSpec(Section):
    """One search dimension, mapped onto Optuna's `suggest_float`, `suggest_int` or
    `suggest_categorical`. `float`/`int` need `low` and `high` (inclusive); `categorical` needs
    `choices`."""

    type: Literal["float", "int", "categorical"]
    low: int | float | None = None
    high: int | float | None = None
    log: bool = False
    step: int | float | None = Field(default=None, gt=0)
    choices: list[Scalar] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _per_type(self) -> ParamSpec:
        if self.type == "categorical":
            for key in ("low", "high", "step"):
                if getattr(self, key) is not None:
                    field_error((key,), "not allowed for a categorical param; use choices")
            if self.log:
                field_error(("log",), "not allowed for a categorical param")
            if self.choices is None:
                field_error(("choices",), "required for a categorical param")
            seen: list[Any] = []
            for i, choice in enumerate(self.choices):
                if any(choice == s and type(choice) is type(s) for s in seen):
                    field_error(("choices", i), f"duplicate choice {show(choice)}")
                seen.append(choice)
            return self
        if self.choices is not None:
            field_error(("choices",), f"not allowed for a {self.type} param; use low and high")
        for key in ("low", "high"):
            value = getattr(self, key)
            if value is None:
                field_error((key,), f"required for a {self.type} param")
            if self.type == "int" and float(value) != int(value):
                field_error((key,), f"must be an integer for an int param, got {value}")
        assert self.low is not None and self.high is not None  # required just above
        if self.type == "int":
            self.low, self.high = int(self.low), int(self.high)
            if self.step is not None and float(self.step) != int(self.step):
                field_error(("step",), f"must be an integer for an int param, got {self.step}")
        if self.high < self.low:
            field_error(("high",), f"must be >= low ({self.low}), got {self.high}")
        if self.log and self.low <= 0:
            field_error(("low",), f"must be > 0 when log is true, got {self.low}")
        if self.log and self.step not in (None, 1):
            field_error(("step",), "cannot be combined with log: true")
        return self

    def probe_values(self) -> list[Any]:
        """Values that bound the search: both ends of a range, or every choice."""
        return list(self.choices or ()) if self.type == "categorical" else [self.low, self.high]


class SweepConfig(Section):
    """An Optuna study. `objective` is a metric name or a list of names or of
    `{metric, direction}`; it is stored as the list. Each objective's direction is its metric's
    own (`record.is_maximized`); a `direction` given, on an objective or for all of them, must
    agree with it. A multi-objective study cannot be pruned,
    so its pruner defaults to `none` and any other pruner is an error."""

    trials: int = Field(default=20, gt=0)
    timeout: float | None = Field(default=None, gt=0)
    objective: list[Objective] = Field(
        default_factory=lambda: [Objective.model_validate({"metric": DEFAULT_OBJECTIVE})],
        min_length=1,
    )
    # The direction of every objective that gives none; each metric's own when left out.
    direction: Direction | None = None
    reduce: ReduceConfig = Field(default_factory=ReduceConfig)
    sampler: SamplerConfig = Field(default_factory=SamplerConfig)
    pruner: PrunerConfig = Field(default_factory=PrunerConfig)
    storage: str = "sqlite:///results/optuna.db"
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    seeds_per_trial: int = Field(default=1, gt=0)
    workers: int = Field(default=1, gt=0)
    # Database storages only: a running trial records a heartbeat every `heartbeat_interval`
    # seconds; one silent for `grace_period` seconds belongs to a dead worker, is failed and is
    # re-run up to `retries` times.
    heartbeat_interval: int = Field(default=10, gt=0)
    grace_period: int = Field(default=60, gt=0)
    retries: int = Field(default=1, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _normalize(cls, data: Any) -> Any:
        """A bare metric or component name becomes its mapping form."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        direction = data.get("direction")
        objective = data.get("objective", DEFAULT_OBJECTIVE)
        bare = [objective] if isinstance(objective, str) else objective
        if direction is not None and isinstance(bare, list):
            for o in bare:
                metric = o if isinstance(o, str) else None
                if isinstance(o, dict) and "direction" not in o:
                    metric = o.get("metric")
                problem = _contradiction(metric, direction)
                if problem:
                    field_error(("direction",), problem)
        given = {} if direction is None else {"direction": direction}
        if isinstance(bare, list):
            data["objective"] = [
                {"metric": o, **given}
                if isinstance(o, str)
                else {**given, **o}
                if isinstance(o, dict)
                else o
                for o in bare
            ]
        for key in ("reduce", "sampler", "pruner"):
            if isinstance(data.get(key), str):
                data[key] = {"name": data[key]}
        return data

    @field_validator("storage")
    @classmethod
    def _storage_url(cls, storage: str) -> str:
        if storage.startswith("journal:"):
            if not storage.removeprefix("journal:").strip():
                raise ValueError("journal storage needs a file: journal:PATH")
        elif not _DB_URL.fullmatch(storage):
            raise ValueError(
                "must be journal:PATH or a database URL such as sqlite:///results/optuna.db, "
                f"got {storage!r}"
            )
        return storage

    @model_validator(mode="after")
    def _consistent(self) -> SweepConfig:
        metrics = [o.metric for o in self.objective]
        for i, metric in enumerate(metrics):
            if metric in metrics[:i]:
                field_error(("objective", i, "metric"), f"duplicate objective {metric!r}")
        if self.is_multi_objective and self.pruner.name != "none":
            if "pruner" in self.model_fields_set:
                field_error(
                    ("pruner",),
                    f"a multi-objective study cannot be pruned; use pruner: none, "
                    f"not {self.pruner.name!r}",
                )
            self.pruner = PrunerConfig(name="none")
        if self.grace_period <= self.heartbeat_interval:
            field_error(
                ("grace_period",),
                f"must be > heartbeat_interval ({self.heartbeat_interval}), got "
                f"{self.grace_period}: a live trial would be taken for a dead one",
            )
        if self.is_multi_objective and self.sampler.name == "cmaes":
            field_error(("sampler",), "cmaes supports a single objective only; try nsga2 or tpe")
        if self.sampler.name in ("grid", "bruteforce"):
            for key, param in self.params.items():
                if param.type == "float" and param.step is None:
                    field_error(
                        ("sampler",),
                        f"{self.sampler.name} needs a finite space: give float param "
                        f"{key!r} a step, or make it categorical",
                    )
        return self

    @property
    def is_multi_objective(self) -> bool:
        return len(self.objective) > 1

    @property
    def metrics(self) -> list[str]:
        return [o.metric for o in self.objective]

    @property
    def directions(self) -> list[Direction]:
        return [o.direction for o in self.objective]
