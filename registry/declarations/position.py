"""position slot: `none`, `learned`, `sinusoidal` and `rope` (aliases `rope-neox`, `rope-gptj`),
implemented in `registry/position.py`."""

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from annotated_types import Gt, Interval

from registry.core import register


class Position:
    """No parameters unless a kind says otherwise."""

    @classmethod  # Any: a kind that overrides this names the options and dims it reads
    def param_count(cls, *args: Any, **dims: Any) -> int:
        return 0


@register("position", "none", implementation="registry.position:NoPosition")
class NoPosition(Position):
    pass


@register("position", "learned", implementation="registry.position:LearnedPosition")
class LearnedPosition(Position):
    @classmethod
    def param_count(cls, *, dim: int, head_dim: int, max_seq_len: int) -> int:
        return max_seq_len * dim


@register("position", "sinusoidal", implementation="registry.position:SinusoidalPosition")
class SinusoidalPosition(Position):
    @dataclass(frozen=True)
    class Options:
        base: Annotated[float, Gt(0)] = 10000.0
        amplitude: Annotated[float, Gt(0)] = 0.02


def rotary_dim(head_dim: int, fraction: float) -> int:
    """Rotated channels per head, as GPT-NeoX's `rotary_pct`: int(head_dim * fraction)."""
    return int(head_dim * fraction)


@register(
    "position",
    "rope",
    "rope-neox",
    "rope-gptj",
    implementation="registry.position:RotaryPosition",
)
class RotaryPosition(Position):
    alias_options: ClassVar[dict[str, dict[str, str]]] = {
        "rope-neox": {"style": "neox"},
        "rope-gptj": {"style": "gptj"},
    }

    @dataclass(frozen=True)
    class Options:
        style: Literal["neox", "gptj"] = "neox"
        theta: Annotated[float, Gt(0)] = 10000.0
        fraction: Annotated[float, Interval(gt=0, le=1)] = 1.0

    @classmethod
    def check_dims(cls, options: Options, *, dim: int, head_dim: int, max_seq_len: int) -> None:
        rotated = rotary_dim(head_dim, options.fraction)
        if rotated < 2 or rotated % 2:
            raise ValueError(
                f"the rotary dimension int(head_dim {head_dim} * fraction {options.fraction}) = "
                f"{rotated} must be even and at least 2"
            )
