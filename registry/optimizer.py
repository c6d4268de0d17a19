"""optimizer slot: `adamw` (default), `sgd` and `muon`, each a `torch.optim.Optimizer` built from a
model.

    registry.build("optimizer", {"name": "muon", "ns_steps": 5}, model=model, lr=0.02,
                   weight_decay=0.0)

`lr` and `weight_decay` are every optimizer's (the spec's `train.optimizer.lr` and `.weight_decay`,
so the schedule and sweeps address them alike); the options are each kind's own. `fused` (None:
on CUDA) chooses AdamW's fused kernel over the multi-tensor path.

Weight decay: parameters with fewer than two dimensions (norm gains, biases) and every embedding
table (`nn.Embedding` modules, or any parameter whose name contains "embed") get no decay. Decaying
them shrinks scales and lookup rows rather than regularising a linear map. A tied LM head shares
its tensor with the token embedding, so it is not decayed either.

`muon` (Jordan et al. 2024; modded-nanogpt, nanochat, OLMo-core) orthogonalises the momentum of
each hidden-layer weight matrix with a Newton–Schulz iteration: `torch.optim.Muon` where torch has
it, else `NewtonSchulzMuon`, the same algorithm. It takes the 2-D parameters that are neither an
embedding nor the output head (`OUTPUT_HEADS`); AdamW (`adamw_lr`, `betas`, `eps`) takes the rest:
embeddings, the head, norms and biases. The trainer sees one optimizer, `MuonWithAdamW`, whose
state dict holds both, so a checkpoint resumes bit for bit.

`scales` (AdamW and Muon; the caller's parametrization, `minimind.model.mup`) gives parameters lr and
weight-decay multipliers of their own: each multiplier pair is a param group at its own lr.

The options are declared in `registry/declarations/optimizer.py`.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Mapping
from typing import Any, overload

import torch
from torch import nn

from registry.declarations import optimizer as declared

OUTPUT_HEADS = ("lm_head",)


def is_output_head(name: str) -> bool:
    """Whether parameter `name` (qualified) belongs to an output head (`OUTPUT_HEADS`)."""
    return name.startswith(tuple(f"{head}." for head in OUTPUT_HEADS))


"""Names of the modules whose weight is the output head (kept off Muon, like the embeddings)."""


def _embedding_ids(model: nn.Module) -> set[int]:
    return {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}


Scales = Mapping[str, tuple[float, float]]
"""Per-parameter (lr multiplier, weight-decay multiplier) by qualified name, as a caller's
parametrization sets them (`minimind.model.mup.lr_scales`); a parameter it does not name keeps (1, 1)."""


def param_groups(
    model: nn.Module,
    weight_decay: float,
    params: list[nn.Parameter] | None = None,
    lr: float | None = None,
    scales: Scales | None = None,
) -> list[dict[str, Any]]:
    """Split the trainable parameters (of `model`, or those of them in `params`) into a decayed
    group and a non-decayed group. `named_parameters()` yields a shared (tied) tensor once.

    With `scales` (and the base `lr`), each of the two is split again by multipliers, and each
    group carries its own `lr` (lr × its lr multiplier) and `weight_decay` (× its multiplier):
    the schedule then scales each group's own lr."""
    embeddings = _embedding_ids(model)
    chosen = None if params is None else {id(p) for p in params}
    groups: dict[tuple[bool, float, float], list[nn.Parameter]] = {
        (True, 1.0, 1.0): [],
        (False, 1.0, 1.0): [],
    }
    for name, p in model.named_parameters():
        if not p.requires_grad or (chosen is not None and id(p) not in chosen):
            continue
        decayed = not (p.ndim < 2 or id(p) in embeddings or "embed" in name)
        lr_mult, wd_mult = scales.get(name, (1.0, 1.0)) if scales is not None else (1.0, 1.0)
        groups.setdefault((decayed, lr_mult, wd_mult), []).append(p)
    if scales is not None and lr is None:
        raise ValueError("per-parameter scales need the base lr")
    out = []
    for (decayed, lr_mult, wd_mult), members in groups.items():
        if scales is not None and not members:
            continue  # without scales the two groups stay, empty or not, as they always were
        group: dict[str, Any] = {
            "params": members,
            "weight_decay": weight_decay * wd_mult if decayed else 0.0,
        }
        if scales is not None:
            assert lr is not None  # checked above
            group["lr"] = lr * lr_mult
        out.append(group)
    return out


def muon_split(model: nn.Module) -> tuple[list[str], list[str]]:
    """Names of the trainable parameters for Muon (2-D, in the hidden layers) and for AdamW."""
    embeddings = _embedding_ids(model)
    muon, adamw = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        hidden = p.ndim == 2 and id(p) not in embeddings and "embed" not in name
        if hidden and not is_output_head(name):
            muon.append(name)
        else:
            adamw.append(name)
    return muon, adamw


def _use_fused(model: nn.Module, fused: bool | None) -> bool:
    return next(model.parameters()).device.type == "cuda" if fused is None else fused


def _adamw_settings(
    lr: float, betas: tuple[float, float], eps: float, fused: bool
) -> dict[str, Any]:
    """torch.optim.AdamW's keyword arguments. fused: one kernel for the whole update (CUDA);
    else the multi-tensor (foreach) path, the fastest on the CPU."""
    return dict(
        lr=lr, betas=betas, eps=eps, fused=True if fused else None, foreach=None if fused else True
    )


class AdamW(declared.AdamW, torch.optim.AdamW):
    """AdamW over `param_groups(model, weight_decay)`, each group at its own lr with `scales`."""

    def __init__(
        self,
        options: declared.AdamW.Options,
        *,
        model: nn.Module,
        lr: float,
        weight_decay: float,
        fused: bool | None = None,
        scales: Scales | None = None,
    ) -> None:
        settings = _adamw_settings(lr, options.betas, options.eps, _use_fused(model, fused))
        super().__init__(param_groups(model, weight_decay, lr=lr, scales=scales), **settings)


class SGD(declared.SGD, torch.optim.SGD):
    """SGD (with momentum and Nesterov as options) over `param_groups(model, weight_decay)`."""

    def __init__(
        self,
        options: declared.SGD.Options,
        *,
        model: nn.Module,
        lr: float,
        weight_decay: float,
        fused: bool | None = None,
    ) -> None:
        super().__init__(
            param_groups(model, weight_decay),
            lr=lr,
            momentum=options.momentum,
            nesterov=options.nesterov,
            foreach=True,
        )


NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
"""The quintic Newton–Schulz coefficients of Keller Jordan's Muon (and torch.optim.Muon)."""


def zeropower_via_newtonschulz(
    grad: torch.Tensor, ns_steps: int, eps: float = 1e-7
) -> torch.Tensor:
    """An approximately orthogonal matrix with grad's singular vectors: grad [m, n] -> [m, n] (bf16).

    X = G / ||G||_F (on the wide side), then ns_steps times X <- aX + (bXXᵀ + c(XXᵀ)²)X.
    """
    a, b, c = NS_COEFFICIENTS
    x = grad.bfloat16()
    tall = grad.size(0) > grad.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


def newton_schulz_flops(shape: tuple[int, int], ns_steps: int) -> int:
    """The matrix-multiply FLOPs of `zeropower_via_newtonschulz` on a gradient of `shape`
    (multiply-adds counted as 2): per iteration, on the wide side X [m, n] with m <= n, the Gram
    matrix XXᵀ (2m²n), its square (2m³) and the product with X (2m²n)."""
    m, n = sorted(shape)
    return ns_steps * (4 * m * m * n + 2 * m**3)


def _reevaluate(closure: Callable[[], float] | None) -> float | None:
    """The loss of `closure` (the `torch.optim.Optimizer.step` contract: it recomputes the loss
    and the gradients, so it runs with autograd on inside the step's `no_grad`), or None."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class NewtonSchulzMuon(torch.optim.Optimizer):
    """Muon for a torch without `torch.optim.Muon`, the same update as torch's (2.13):

    B <- μB + (1-μ)g;  U = (1-μ)g + μB (nesterov) or B;
    θ <- θ(1 - lr·λ) - lr·sqrt(max(1, m/n))·NS(U)
    """

    def __init__(
        self,
        params: Any,
        lr: float,
        weight_decay: float,
        momentum: float,
        nesterov: bool,
        ns_steps: int,
    ) -> None:
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
        )
        super().__init__(params, defaults)

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = _reevaluate(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                momentum, buffer = group["momentum"], state["momentum_buffer"]
                buffer.lerp_(p.grad, 1 - momentum)
                update = p.grad.lerp(buffer, momentum) if group["nesterov"] else buffer
                ortho = zeropower_via_newtonschulz(update, group["ns_steps"])
                p.mul_(1 - group["lr"] * group["weight_decay"])
                scale = math.sqrt(max(1, p.size(0) / p.size(1)))
                p.add_(ortho, alpha=-group["lr"] * scale)
        return loss


MUON = getattr(torch.optim, "Muon", NewtonSchulzMuon)
"""torch's Muon where this torch has it (2.9 and later), else the fallback."""


class MuonWithAdamW(torch.optim.Optimizer):
    """One optimizer made of a Muon and an AdamW over disjoint parameters.

    `param_groups` are both optimizers' groups (the same dicts, so a scheduler sets both lrs, each
    relative to its own base); `step` steps both; the state dict holds both state dicts.
    """

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.Optimizer) -> None:
        self.muon, self.adamw = muon, adamw
        groups = [*muon.param_groups, *adamw.param_groups]
        super().__init__([{"params": g["params"]} for g in groups], {})
        self.param_groups = groups
        self.state = collections.ChainMap(muon.state, adamw.state)  # type: ignore[assignment]

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = _reevaluate(closure)  # once, for the gradients both optimizers step on
        self.muon.step()
        self.adamw.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
        # loading replaces each optimizer's group dicts: point at the new ones
        self.param_groups = [*self.muon.param_groups, *self.adamw.param_groups]


class Muon(declared.Muon, MuonWithAdamW):
    """Muon on the hidden layers' 2-D weights (`muon_split`), AdamW on the rest; with `scales`,
    each side's groups at their own lr (the AdamW side's base is `adamw_lr`)."""

    def __init__(
        self,
        options: declared.Muon.Options,
        *,
        model: nn.Module,
        lr: float,
        weight_decay: float,
        fused: bool | None = None,
        scales: Scales | None = None,
    ) -> None:
        named = dict(model.named_parameters())
        muon_names, adamw_names = muon_split(model)
        muon_params: Any = [named[n] for n in muon_names]
        if scales is not None:  # one group per multiplier pair, each at its own lr
            muon_params = param_groups(model, weight_decay, muon_params, lr=lr, scales=scales)
        muon = MUON(
            muon_params,
            lr=lr,
            weight_decay=weight_decay,
            momentum=options.momentum,
            nesterov=options.nesterov,
            ns_steps=options.ns_steps,
        )
        adamw_groups = param_groups(
            model, weight_decay, [named[n] for n in adamw_names], options.adamw_lr, scales
        )
        settings = _adamw_settings(
            options.adamw_lr, options.betas, options.eps, _use_fused(model, fused)
        )
        adamw = torch.optim.AdamW(adamw_groups, **settings)
        super().__init__(muon, adamw)
