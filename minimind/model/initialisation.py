"""Common random numbers for the initialisation: each parameter tensor from its own stream.

Every parameter tensor is drawn from a generator seeded by (the run's seed, the parameter's
qualified name), never from one stream shared by the whole model. Two arms built with the same
seed therefore start every tensor they have in common (same name, same shape, same rule) bit for
bit identical, whatever else differs: a module of another shape, an extra module, a module fewer.
Before this, building a module of another shape shifted the random stream of every tensor drawn
after it, so an MLP or attention arm shared no initial tensor with its reference, and pairing by
seed removed little of the variance (docs/statistics.md, "Shared initialisation").

A tensor an arm only resizes (an MLP's hidden width matched to a parameter budget) is a different
tensor: its stream is keyed by its shape too, so it is drawn whole and is not shared, not even in
the block the two shapes have in common. Under `fan_in` and `torch_default` its scale depends on its shape, so
no block of it could be identical; under `normal` a shared leading block would still feed a
different function (another width, another nonlinearity), and drawing one tensor per stream keeps
the draw one `normal_` call. `shared_fraction` counts same name, same shape, same rule only.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch
from torch import nn

from minimind.model import mup
from minimind.model.config import InitConfig, ModelConfig

RESIDUAL_OUTPUTS = ("o_proj.weight", "down_proj.weight")
"""Output projections into the residual stream: their init std is scaled by 1/sqrt(2·n_layers),
or they start at zero (`minimind.model.config.InitConfig`)."""

EMBEDDING_STD = 0.02  # GPT-2's embedding std, used by the `normal` and `fan_in` schemes


@dataclass(frozen=True)
class InitialDraw:
    """How one parameter tensor starts.

    `distribution`: `normal` (std `scale`), `uniform` (on ±`scale`), `zeros`, or `as_built` (the
    constant its module's constructor sets: a norm's ones as `weight`, zeros as `bias`, whichever
    norm it is). Two tensors with equal draws under the same seed and name are bit-identical.
    """

    shape: tuple[int, ...]
    distribution: str
    scale: float = 0.0


def _linear_draw(
    name: str, linear: nn.Linear, init: InitConfig, n_layers: int, std_multiplier: float
) -> InitialDraw:
    shape = tuple(linear.weight.shape)
    if init.zero_out_proj and name.endswith(RESIDUAL_OUTPUTS):
        return InitialDraw(shape, "zeros")
    if init.scheme == "torch_default":
        # nn.Linear's kaiming_uniform_(a=sqrt(5)): U(±1/sqrt(fan_in))
        return InitialDraw(shape, "uniform", linear.in_features**-0.5 * std_multiplier)
    std = 0.02 if init.scheme == "normal" else linear.in_features**-0.5
    if name.endswith(RESIDUAL_OUTPUTS):
        std /= math.sqrt(2 * n_layers)
    return InitialDraw(shape, "normal", std * std_multiplier)


def initial_draws(model: nn.Module, config: ModelConfig) -> dict[str, InitialDraw]:
    """The draw of each parameter of `model` (before any tying), by qualified name: `config.init`'s
    scheme, each linear weight's std times its μP factor under `model.parametrization: mup`
    (`minimind.model.mup.init_std_multiplier`; 1 under the standard parametrization)."""
    init, n_layers = config.init, config.n_layers
    m = mup.width_multiplier(config)
    draws: dict[str, InitialDraw] = {}
    for module_name, module in model.named_modules():
        prefix = f"{module_name}." if module_name else ""
        for param_name, param in module.named_parameters(recurse=False):
            name = prefix + param_name
            shape = tuple(param.shape)
            if isinstance(module, nn.Linear) and param_name == "weight":
                role = mup.parameter_role(name, module, param)
                multiplier = mup.init_std_multiplier(role, init, m)
                draws[name] = _linear_draw(name, module, init, n_layers, multiplier)
            elif isinstance(module, nn.Linear):  # the bias
                draws[name] = (
                    InitialDraw(shape, "uniform", module.in_features**-0.5)
                    if init.scheme == "torch_default"
                    else InitialDraw(shape, "zeros")
                )
            elif isinstance(module, nn.Embedding):
                std = 1.0 if init.scheme == "torch_default" else EMBEDDING_STD
                draws[name] = InitialDraw(shape, "normal", std)
            else:
                draws[name] = InitialDraw(shape, "as_built")
    return draws


def parameter_generator(
    seed: int, name: str, shape: tuple[int, ...], device: torch.device
) -> torch.Generator:
    """The stream of parameter `name` of `shape` under `seed`: a generator on `device` seeded by
    63 bits of SHA-256(seed, name, shape). No two names share a stream, and a resized tensor gets
    a stream of its own (with the name alone, the leading rows of a taller tensor would repeat the
    shorter one's: a share that would depend on which dimension an arm resized)."""
    digest = hashlib.sha256(f"{seed}\0{name}\0{shape}".encode()).digest()
    return torch.Generator(device).manual_seed(int.from_bytes(digest[:8], "little") >> 1)


@torch.no_grad()
def initialise(model: nn.Module, draws: dict[str, InitialDraw], seed: int) -> None:
    """Draw every parameter of `model` from its own stream (`parameter_generator`). Parameters on
    the meta device hold no values and are left as they are."""
    for name, param in model.named_parameters():
        draw = draws[name]
        if param.device.type == "meta" or draw.distribution == "as_built":
            continue
        if draw.distribution == "zeros":
            param.zero_()
            continue
        generator = parameter_generator(seed, name, draw.shape, param.device)
        if draw.distribution == "normal":
            param.normal_(0.0, draw.scale, generator=generator)
        else:
            param.uniform_(-draw.scale, draw.scale, generator=generator)


def shared_fraction(reference: dict[str, InitialDraw], arm: dict[str, InitialDraw]) -> float:
    """The fraction of `reference`'s initial parameter elements that `arm`, built with the same
    seed, starts with bit-identical: the tensors with the same name and the same draw."""
    total = sum(math.prod(draw.shape) for draw in reference.values())
    shared = sum(math.prod(draw.shape) for name, draw in reference.items() if arm.get(name) == draw)
    return shared / total if total else 1.0
