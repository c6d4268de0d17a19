"""The scaling rules of the maximal update parametrization (μP), the one home of its formulas.

μP for Adam (Yang et al. 2022, "Tensor Programs V", Table 3; the `mup` package's `MuReadout`
and `MuAdamW`) makes the size of every layer's update
independent of the width, so that the hyperparameters tuned at a small `base_width` stay right
at a larger one. With m = dim / base_width, each parameter has a role and a rule:

| role | which | init std | AdamW lr | weight decay |
|---|---|---|---|---|
| embedding | `nn.Embedding` tables (tokens, learned positions) | the scheme's | lr · embedding_lr_mult | the same |
| hidden | every other `nn.Linear` weight (attention, MLP, router) | the scheme's at base fan-in · m^-1/2 | lr / m | weight_decay · m |
| output | the untied LM head | the scheme's at base fan-in | lr | the same |
| vector | norm gains, biases | the scheme's | lr | the same |

and the model multiplies its logits by 1/m (`output_multiplier`: the readout's effective weight
then has init variance ∝ 1/fan_in² and Adam step ∝ 1/fan_in, Table 3's output row) and scales
attention scores by sqrt(base_head_dim) / head_dim instead of 1/sqrt(head_dim)
(`attention_scale`: 1/head_dim as the head grows, equal to the standard at the base).

"The scheme's at base fan-in": `normal` draws every linear at std 0.02 whatever its fan-in, so μP
scales a hidden weight's std by m^-1/2 (variance ∝ 1/fan_in); `fan_in` and `torch_default`
already draw at ∝ fan_in^-1/2, so a hidden weight keeps its std and the untied head takes the
std of its base fan-in (× m^1/2, as `mup`'s `MuReadout` rescales it). Weight decay times m keeps
AdamW's decay per step, lr · weight_decay, independent of the width, as `MuAdamW` does.

A tied head is the embedding table: it is drawn and stepped as an embedding, and its readout
role gets μP through the 1/m logit multiplier alone (a constant-std readout divided by m is
the output row's init; its constant lr divided by m is the output row's lr).

Muon (`registry/optimizer.py`) orthogonalises each hidden matrix's update and scales it by
sqrt(max(1, fan_out / fan_in)): its spectral norm is then lr times a constant for matrices whose
aspect ratio does not change with width, which is what μP's spectral condition asks (Yang,
Simon & Bernstein 2023). So Muon's hidden lr is not divided by m; the parameters Muon leaves to
AdamW (embeddings, head, vectors) follow the table with `adamw_lr` as their base lr, and the
init and the multipliers are the same as under AdamW. docs/mup.md has the derivation, the
literature and the failure modes.

Everything here assumes every hidden width (the MLP's hidden size, n_heads · head_dim) grows in
proportion to `dim`, the width m measures.
"""

from __future__ import annotations

import math
from typing import Literal

from torch import nn

from minimind.model.config import MUP_OPTIMIZERS, InitConfig, ModelConfig
from registry.optimizer import is_output_head, muon_split

Role = Literal["embedding", "hidden", "output", "vector"]

ORTHOGONALISED_OPTIMIZERS = ("muon",)
"""Optimizers whose hidden-matrix updates are already width-independent (no lr / m there)."""


def is_mup(config: ModelConfig) -> bool:
    return config.parametrization.name == "mup"


def width_multiplier(config: ModelConfig) -> float:
    """m = dim / base_width under μP; 1 under the standard parametrization."""
    base = config.parametrization.base_width
    return config.dim / base if is_mup(config) and base is not None else 1.0


def parameter_role(name: str, module: nn.Module, param: nn.Parameter) -> Role:
    """The role of parameter `name` (qualified) of `module`, its owning module."""
    if isinstance(module, nn.Embedding) or "embed" in name:
        return "embedding"
    if is_output_head(name) and param.ndim == 2:
        return "output"
    if isinstance(module, nn.Linear) and param.ndim == 2:
        return "hidden"
    return "vector"


def parameter_roles(model: nn.Module) -> dict[str, Role]:
    """The role of each parameter of `model` by qualified name; a tied head's tensor is listed
    under both names, each with its own module's role (the optimizer sees the embedding's)."""
    roles: dict[str, Role] = {}
    for module_name, module in model.named_modules():
        prefix = f"{module_name}." if module_name else ""
        for param_name, param in module.named_parameters(recurse=False):
            roles[prefix + param_name] = parameter_role(prefix + param_name, module, param)
    return roles


def init_std_multiplier(role: Role, init: InitConfig, m: float) -> float:
    """The factor on the standard draw's std (or uniform bound) of a tensor of `role` at width
    multiplier m, under `init`'s scheme (1 for every role at m = 1)."""
    fan_in_scaled = init.scheme != "normal"  # fan_in, torch_default: already ∝ fan_in^-1/2
    if role == "hidden":
        return 1.0 if fan_in_scaled else m**-0.5
    if role == "output":
        return math.sqrt(m) if fan_in_scaled else 1.0
    return 1.0


def lr_multipliers(
    role: Role, m: float, embedding_lr_mult: float, orthogonalised: bool
) -> tuple[float, float]:
    """(lr multiplier, weight-decay multiplier) of a tensor of `role` at width multiplier m;
    `orthogonalised`: the tensor is stepped by Muon, whose update needs no width factor."""
    if role == "hidden" and not orthogonalised:
        return 1.0 / m, m
    if role == "embedding":
        return embedding_lr_mult, 1.0
    return 1.0, 1.0


def output_multiplier(config: ModelConfig) -> float:
    """The factor on the logits: 1/m under μP, 1 otherwise."""
    return 1.0 / width_multiplier(config)


def base_head_dim(config: ModelConfig) -> float:
    """The head dimension at the base width: the spec's `base_head_dim`, else head_dim / m (the
    head grows with the width)."""
    given = config.parametrization.base_head_dim
    return given if given is not None else config.resolved_head_dim / width_multiplier(config)


def attention_scale(config: ModelConfig) -> float | None:
    """The attention score scale: None (SDPA's 1/sqrt(head_dim)) under the standard
    parametrization; sqrt(base_head_dim) / head_dim under μP, which is 1/sqrt(head_dim) at the
    base and ∝ 1/head_dim as the head grows (held-fixed heads keep 1/sqrt(head_dim))."""
    if not is_mup(config):
        return None
    return math.sqrt(base_head_dim(config)) / config.resolved_head_dim


def lr_scales(
    model: nn.Module, config: ModelConfig, optimizer: str
) -> dict[str, tuple[float, float]]:
    """(lr multiplier, weight-decay multiplier) of each trainable parameter of `model` (built
    from `config`) under μP for `optimizer` (one of `MUP_OPTIMIZERS`), by qualified name as
    `named_parameters` yields it (a tied head once, as the embedding)."""
    if optimizer not in MUP_OPTIMIZERS:
        raise ValueError(
            f"train.optimizer.name: mup is defined for {', '.join(MUP_OPTIMIZERS)}, not {optimizer!r}"
        )
    m = width_multiplier(config)
    roles = parameter_roles(model)
    orthogonalised = set(muon_split(model)[0]) if optimizer in ORTHOGONALISED_OPTIMIZERS else set()
    embedding_lr_mult = config.parametrization.embedding_lr_mult
    return {
        name: lr_multipliers(roles[name], m, embedding_lr_mult, name in orthogonalised)
        for name, param in model.named_parameters()
        if param.requires_grad
    }
