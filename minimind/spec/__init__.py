"""Experiment specs (README.md, 'Specs'; docs/architecture.md, 'Layers'): schema, loading, overrides and expansion into variants.

    from minimind.spec import load_spec, expand, flatten, spec_hash, SpecError

    spec = load_spec("experiments/norm.yaml", overrides=["train.steps=50"])
    for variant in expand(spec):          # one per ablation cell; `base` without `ablate`
        cfg = variant.spec.model_config_obj()
        params = flatten(variant.spec)    # dotted keys -> scalars, for MLflow

Every problem is a `SpecError` whose `str` is one line `<field.path>: <message>`.
"""

from minimind.spec.errors import SpecError
from minimind.spec.expansion import validate_spec
from minimind.spec.ladder import LadderConfig, Rung
from minimind.spec.loader import dump_spec, load_spec, parse_override
from minimind.spec.matching import MatchConfig
from minimind.spec.naming import BASE_VARIANT, variant_name
from minimind.spec.schema import ModelSection, Spec
from minimind.spec.sections import (
    OptimizerConfig,
    PowerHint,
    ScheduleConfig,
    TrackingConfig,
    TrainConfig,
)
from minimind.spec.sweep_config import (
    OBJECTIVE_METRICS,
    Objective,
    ParamSpec,
    PrunerConfig,
    ReduceConfig,
    SamplerConfig,
    SweepConfig,
)
from minimind.spec.variants import Variant, expand, flatten, resolved_model, spec_hash, with_values

__all__ = [
    "BASE_VARIANT",
    "OBJECTIVE_METRICS",
    "ModelSection",
    "Objective",
    "OptimizerConfig",
    "ParamSpec",
    "PrunerConfig",
    "ReduceConfig",
    "Rung",
    "SamplerConfig",
    "ScheduleConfig",
    "Spec",
    "SpecError",
    "SweepConfig",
    "TrackingConfig",
    "LadderConfig",
    "MatchConfig",
    "PowerHint",
    "TrainConfig",
    "Variant",
    "dump_spec",
    "expand",
    "flatten",
    "load_spec",
    "parse_override",
    "resolved_model",
    "spec_hash",
    "validate_spec",
    "variant_name",
    "with_values",
]
