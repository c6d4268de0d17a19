"""`match:` fair budgets: resize one integer knob of each variant so that its size matches the
first variant's (the baseline) within a tolerance.

`match: {by: params, knob: model.mlp.hidden, tolerance: 0.01}` gives a ReLU MLP the width at
which it has as many parameters as the SwiGLU baseline; `by: active_params` matches what a token
uses (an MoE against a dense model), `by: flops` the training FLOPs per token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import Field

from minimind.spec.sections import Section

if TYPE_CHECKING:
    from minimind.model.config import ModelConfig

Variant = TypeVar("Variant")  # a validated variant: the schema's `Spec`

MatchBy = Literal["params", "active_params", "flops"]
KNOB_LIMIT = 1 << 20
"""The largest knob value searched."""


class MatchConfig(Section):
    """The size every variant is matched on (`by`), the integer model field resized to do it
    (`knob`, a dotted key such as `model.mlp.hidden` or `model.dim`) and the relative
    tolerance."""

    by: MatchBy = "params"
    knob: str = Field(pattern=r"^model\.")
    tolerance: float = Field(default=0.01, gt=0, lt=1)


def size(cfg: ModelConfig, seq_len: int, by: MatchBy) -> float:
    """What `by` counts in the model `cfg` trained at `seq_len`: all parameters, active
    parameters, or FLOPs per token."""
    if by == "params":
        return float(cfg.num_params())
    if by == "active_params":
        return float(cfg.num_active_params())
    return float(cfg.flops_per_token(seq_len))


def match_knob(
    build: Callable[[Mapping[str, Any]], Variant | tuple[str, str]],
    measure: Callable[[Variant], float],
    assignments: Mapping[str, Any],
    target: float,
    match: MatchConfig,
) -> tuple[Variant, int] | str:
    """The variant (`assignments`, built by `build`, its size given by `measure`) with
    `match.knob` set to the value whose size is closest to `target`, and that value; or why none
    is within the tolerance.

    Sizes grow with the knob, so the smallest value reaching `target` is found by doubling then
    bisection, and it or the value below it is the closest.
    """

    def at(value: int) -> tuple[Variant, float] | str:
        outcome = build({**assignments, match.knob: value})
        if isinstance(outcome, tuple):
            return f"{match.knob}={value}: {outcome[0]}: {outcome[1]}"
        return outcome, measure(outcome)

    low, high = 1, 1
    while True:
        probe = at(high)
        if isinstance(probe, str):
            return probe
        if probe[1] >= target or high >= KNOB_LIMIT:
            break
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        probe = at(middle)
        if isinstance(probe, str):
            return probe
        low, high = (middle, high) if probe[1] < target else (low, middle)
    closest = [(v, *c) for v in (low, high) if not isinstance(c := at(v), str)]
    value, spec, found = min(closest, key=lambda c: abs(c[2] - target))
    error = abs(found - target) / target
    if error > match.tolerance:
        return (
            f"no {match.knob} matches the baseline's {match.by} ({target:.6g}) within "
            f"{match.tolerance:g}: the closest, {value}, gives {found:.6g} ({error:.2%} off)"
        )
    return spec, value
