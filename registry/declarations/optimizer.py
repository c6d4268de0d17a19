"""optimizer slot: `adamw`, `sgd` and `muon` (implemented in `registry/optimizer.py`). Every
optimizer also takes `lr` and `weight_decay`, which are not options (the spec's
`train.optimizer.lr` and `.weight_decay`)."""

from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge, Gt, Lt

from registry.core import register

Beta = Annotated[float, Ge(0), Lt(1)]


@register("optimizer", "adamw", implementation="registry.optimizer:AdamW")
class AdamW:
    @dataclass(frozen=True)
    class Options:
        betas: tuple[Beta, Beta] = (0.9, 0.95)
        eps: Annotated[float, Gt(0)] = 1e-8


@register("optimizer", "sgd", implementation="registry.optimizer:SGD")
class SGD:
    @dataclass(frozen=True)
    class Options:
        momentum: Annotated[float, Ge(0), Lt(1)] = 0.9
        nesterov: bool = False

        def __post_init__(self) -> None:
            if self.nesterov and self.momentum == 0:
                raise ValueError("nesterov needs momentum > 0")


@register("optimizer", "muon", implementation="registry.optimizer:Muon")
class Muon:
    @dataclass(frozen=True)
    class Options:
        momentum: Annotated[float, Ge(0), Lt(1)] = 0.95
        nesterov: bool = True
        ns_steps: Annotated[int, Gt(0), Lt(100)] = 5
        adamw_lr: Annotated[float, Gt(0)] = 3e-3
        betas: tuple[Beta, Beta] = (0.9, 0.95)
        eps: Annotated[float, Gt(0)] = 1e-8
