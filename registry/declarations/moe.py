"""mlp slot, `moe`: a dropless token-choice mixture of experts with optional shared experts
(implemented, and its routing and balancing described, in `registry/moe.py`)."""

from dataclasses import dataclass
from typing import Annotated, Literal

from annotated_types import Ge, Gt

from registry.core import build, count_params, declaration, register, resolve
from registry.declarations.mlp import Hidden


def grouped_mm_error(reason: str) -> ValueError:
    return ValueError(f"dispatch grouped_mm: {reason}; use dispatch loop or auto")


@register("mlp", "moe", implementation="registry.moe:MoE")
class MoE:
    @dataclass(frozen=True)
    class Options:
        n_experts: Annotated[int, Gt(0)] = 4
        top_k: Annotated[int, Gt(0)] = 2
        n_shared: Annotated[int, Ge(0)] = 0
        expert: str = "swiglu"
        hidden: Hidden = None
        aux_loss_coef: Annotated[float, Ge(0)] = 0.01
        aux_scope: Literal["batch", "sequence"] = "batch"
        balance: Literal["aux_loss", "bias"] = "aux_loss"
        bias_update_rate: Annotated[float, Gt(0)] = 1e-3
        dispatch: Literal["auto", "loop", "grouped_mm"] = "auto"

        def __post_init__(self) -> None:
            if self.top_k > self.n_experts:
                raise ValueError(f"top_k ({self.top_k}) must be <= n_experts ({self.n_experts})")
            resolve("mlp", self.expert)
            if issubclass(declaration("mlp", self.expert), MoE):
                raise ValueError("expert must be a dense mlp, not moe")
            if self.dispatch == "grouped_mm":
                # Whether torch and the experts' implementation have a grouped form: only this
                # dispatch imports them.
                from registry.moe import grouped_mm_unsupported

                reason = grouped_mm_unsupported(self.expert_spec())
                if reason is not None:
                    raise grouped_mm_error(reason)

        def expert_spec(self) -> dict[str, object]:
            spec: dict[str, object] = {"name": self.expert}
            if self.hidden is not None:
                spec["hidden"] = self.hidden
            return spec

    @classmethod
    def check_dims(cls, options: Options, *, dim: int, dropout: float = 0.0) -> None:
        if options.dispatch != "grouped_mm":
            return
        import torch  # the expert's matrix sizes, from one built on the meta device

        from registry.moe import grouped_mm_misaligned

        with torch.device("meta"):
            expert = build("mlp", options.expert_spec(), dim=dim, dropout=0.0)
        problem = grouped_mm_misaligned(dim, expert)
        if problem is not None:
            raise grouped_mm_error(problem)

    @classmethod
    def param_count(cls, options: Options, *, dim: int, dropout: float = 0.0) -> int:
        return cls._count(options, dim, options.n_experts)

    @classmethod
    def active_param_count(cls, options: Options, *, dim: int, dropout: float = 0.0) -> int:
        return cls._count(options, dim, options.top_k)

    @staticmethod
    def _count(options: Options, dim: int, routed: int) -> int:
        expert = count_params("mlp", options.expert_spec(), dim=dim, dropout=0.0)
        return dim * options.n_experts + (routed + options.n_shared) * expert
