"""mlp slot, `moe`: a dropless token-choice mixture of experts with optional shared experts
(implemented, and its routing and balancing described, in `registry/moe.py`)."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from annotated_types import Ge, Gt

from registry.core import build, component_class, count_params, declaration, register, resolve
from registry.declarations.mlp import Hidden

if TYPE_CHECKING:
    from torch import nn

# grouped_mm wants operand rows of 16 bytes: 8 elements in bf16/fp16 (4 would do in fp32).
GROUPED_MM_ALIGNMENT = 8


def grouped_mm_error(reason: str) -> ValueError:
    return ValueError(f"dispatch grouped_mm: {reason}; use dispatch loop or auto")


def grouped_mm_unsupported(expert: str | Mapping[str, object]) -> str | None:
    """Why experts built from the mlp spec `expert` cannot use `dispatch: grouped_mm`, or None."""
    # Imported here: only this dispatch needs torch, and a spec without it validates without.
    import torch
    import torch.nn.functional as F

    if not hasattr(F, "grouped_mm"):
        return f"torch {torch.__version__} has no torch.nn.functional.grouped_mm"
    name, options = resolve("mlp", expert)
    if not hasattr(component_class("mlp", name), "grouped_forward"):
        return f"mlp {name!r} has no grouped_forward"
    if options.get("bias"):
        # grouped_mm adds one bias to every group, not one per expert
        return "experts with bias: true have no grouped form"
    return None


def grouped_mm_misaligned(dim: int, expert: "nn.Module") -> str | None:
    """Why grouped_mm cannot take the matrices of `expert` (any device, meta too), or None."""
    sizes = sorted({size for p in expert.parameters() for size in p.shape})
    odd = [size for size in sizes if size % GROUPED_MM_ALIGNMENT]
    if not odd:
        return None
    return (
        f"grouped_mm needs dim ({dim}) and the expert width to be multiples of "
        f"{GROUPED_MM_ALIGNMENT}; expert matrix sizes {odd} are not"
    )


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
