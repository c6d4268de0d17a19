"""The optimizer slot: adamw, sgd and muon against torch's own optimizers step by step, Muon's
parameter grouping, the fallback Newton–Schulz Muon against a plain reference, and plugins."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.distributed.fsdp

import registry
import registry.core
from minimind import MiniMindLM, ModelConfig
from minimind.run.plan import describe_plan, plan_run
from minimind.spec import load_spec
from minimind.spec.sections import OptimizerConfig, TrainConfig
from minimind.training.optim import build_optimizer, describe_optimizer
from registry.optimizer import NewtonSchulzMuon, zeropower_via_newtonschulz

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny ops, one thread

requires_torch_muon = pytest.mark.skipif(
    not hasattr(torch.optim, "Muon"), reason="this torch has no torch.optim.Muon"
)


def tiny_model(**changes) -> MiniMindLM:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=61, dim=32, n_layers=2, n_heads=4, tie_embeddings=False, **changes
    )
    return MiniMindLM(config)


def twins(**changes) -> tuple[MiniMindLM, MiniMindLM]:
    a, b = tiny_model(**changes), tiny_model(**changes)
    b.load_state_dict(a.state_dict())
    return a, b


def set_random_grads(models, step: int) -> None:
    generator = torch.Generator().manual_seed(step)
    for params in zip(*(m.parameters() for m in models), strict=True):
        grad = torch.randn(params[0].shape, generator=generator)
        for p in params:
            p.grad = grad.clone()


def assert_same_weights(a: MiniMindLM, b: MiniMindLM) -> None:
    for (name, x), y in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(x, y), name


def expected_muon_names(model: MiniMindLM) -> set[str]:
    """Written from the rule: 2-D weights inside the blocks (router included); not the token
    embedding, the LM head, norms or biases."""
    return {
        name for name, p in model.named_parameters() if name.startswith("layers.") and p.ndim == 2
    }


def test_muon_groups_the_hidden_matrices_and_leaves_the_rest_to_adamw():
    model = tiny_model(attention={"name": "gqa", "bias": True, "qk_norm": "rmsnorm"})
    optimizer = build_optimizer(model, OptimizerConfig(name="muon"))
    names = {id(p): n for n, p in model.named_parameters()}
    muon = {names[id(p)] for g in optimizer.muon.param_groups for p in g["params"]}
    adamw = {names[id(p)] for g in optimizer.adamw.param_groups for p in g["params"]}
    assert muon == expected_muon_names(model)
    assert adamw == set(names.values()) - muon
    assert {"embed_tokens.weight", "lm_head.weight", "norm.weight"} <= adamw
    assert "layers.0.attn.q_proj.bias" in adamw and "layers.0.attn.q_norm.weight" in adamw
    # the AdamW side decays the untied head, not the embedding, norms or biases
    decayed = {names[id(p)] for p in optimizer.adamw.param_groups[0]["params"]}
    assert decayed == {"lm_head.weight"}
    lines = describe_optimizer(model, OptimizerConfig(name="muon"))
    assert lines[0].startswith(f"  muon: {len(muon)} tensors")
    assert "layers.*.attn.q_proj.weight" in lines[0] and "lm_head.weight" in lines[1]


@requires_torch_muon
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_steps_equal_torch_muon_and_adamw_on_the_same_parameters(nesterov):
    ours_model, reference_model = twins()
    cfg = OptimizerConfig(
        name="muon", lr=0.02, weight_decay=0.01, momentum=0.9, nesterov=nesterov, ns_steps=4,
        adamw_lr=1e-3,
    )  # fmt: skip
    ours = build_optimizer(ours_model, cfg, fused=False)
    muon_names = expected_muon_names(reference_model)
    named = dict(reference_model.named_parameters())
    muon = torch.optim.Muon(
        [named[n] for n in named if n in muon_names],
        lr=0.02, weight_decay=0.01, momentum=0.9, nesterov=nesterov, ns_steps=4,
    )  # fmt: skip
    rest = [n for n in named if n not in muon_names]
    decayed = [named[n] for n in rest if n == "lm_head.weight"]
    adamw = torch.optim.AdamW(
        [
            {"params": decayed, "weight_decay": 0.01},
            {"params": [named[n] for n in rest if n != "lm_head.weight"], "weight_decay": 0.0},
        ],
        lr=1e-3,
        betas=(0.9, 0.95),
        eps=1e-8,
        foreach=True,
    )
    for step in range(3):
        set_random_grads([ours_model, reference_model], step)
        ours.step()
        muon.step()
        adamw.step()
        assert_same_weights(ours_model, reference_model)


@requires_torch_muon
def test_fallback_muon_equals_torch_muon_step_by_step():
    torch.manual_seed(0)
    weights = [torch.randn(24, 16), torch.randn(16, 40)]
    ours = [w.clone().requires_grad_() for w in weights]
    theirs = [w.clone().requires_grad_() for w in weights]
    settings = dict(lr=0.05, weight_decay=0.1, momentum=0.95, nesterov=True, ns_steps=5)
    fallback, reference = NewtonSchulzMuon(ours, **settings), torch.optim.Muon(theirs, **settings)
    for step in range(3):
        generator = torch.Generator().manual_seed(step)
        for a, b in zip(ours, theirs, strict=True):
            a.grad = torch.randn(a.shape, generator=generator)
            b.grad = a.grad.clone()
        fallback.step()
        reference.step()
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("shape", [(8, 20), (20, 8)])
def test_newton_schulz_matches_a_plain_reference_and_orthogonalises(shape):
    torch.manual_seed(0)
    grad = torch.randn(shape)
    a, b, c = 3.4445, -4.7750, 2.0315  # Keller Jordan's quintic coefficients
    x = grad.T if shape[0] > shape[1] else grad
    x = x / x.norm()
    for _ in range(5):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    reference = x.T if shape[0] > shape[1] else x
    ours = zeropower_via_newtonschulz(grad, ns_steps=5).float()
    torch.testing.assert_close(ours, reference, rtol=0, atol=0.05)  # ours runs in bfloat16
    singular = torch.linalg.svdvals(ours)
    assert singular.min() > 0.5 and singular.max() < 1.5  # the iteration's band around 1


def test_adamw_and_sgd_equal_torch_on_the_weight_decay_groups():
    for cfg, reference in (
        (OptimizerConfig(lr=1e-2, weight_decay=0.1), torch.optim.AdamW),
        (OptimizerConfig(name="sgd", lr=0.1, weight_decay=0.1, momentum=0.5), torch.optim.SGD),
    ):
        ours_model, reference_model = twins()
        ours = build_optimizer(ours_model, cfg, fused=False)
        named = dict(reference_model.named_parameters())
        decayed = [p for n, p in named.items() if p.ndim == 2 and "embed" not in n]
        others = [p for n, p in named.items() if not (p.ndim == 2 and "embed" not in n)]
        extra = {"betas": (0.9, 0.95)} if reference is torch.optim.AdamW else {"momentum": 0.5}
        theirs = reference(
            [{"params": decayed, "weight_decay": 0.1}, {"params": others, "weight_decay": 0.0}],
            lr=cfg.lr,
            **extra,
        )
        for step in range(2):
            set_random_grads([ours_model, reference_model], step)
            ours.step()
            theirs.step()
        assert_same_weights(ours_model, reference_model)


def test_optimizer_options_are_validated_per_optimizer():
    with pytest.raises(ValueError, match="unknown option 'momentum' for optimizer 'adamw'"):
        OptimizerConfig(momentum=0.9)
    with pytest.raises(ValueError, match="nesterov needs momentum > 0"):
        OptimizerConfig(name="sgd", momentum=0.0, nesterov=True)
    cfg = OptimizerConfig(name="muon", lr=0.02)
    assert cfg.options()["ns_steps"] == 5 and cfg.options()["adamw_lr"] == 3e-3
    assert cfg.model_dump()["adamw_lr"] == 3e-3  # defaults filled in: logged as params


def test_a_plugin_optimizer_is_built_like_any_other(monkeypatch):
    snapshot = {slot: dict(names) for slot, names in registry.core._names.items()}
    monkeypatch.setattr(registry.core, "_names", snapshot)

    @registry.register("optimizer", "plain-sgd")
    class PlainSGD(torch.optim.SGD):
        @dataclass(frozen=True)
        class Options:
            dampening: float = 0.0

        def __init__(self, options, *, model, lr, weight_decay, fused=None):
            super().__init__(model.parameters(), lr=lr, dampening=options.dampening)

    cfg = OptimizerConfig(name="plain-sgd", lr=0.5, dampening=0.25)
    optimizer = build_optimizer(tiny_model(), cfg)
    assert isinstance(optimizer, PlainSGD) and optimizer.defaults["dampening"] == 0.25


def test_the_dry_run_prints_muons_grouping(write_spec):
    path = write_spec(ablate={"train.optimizer.name": ["adamw", "muon"]})
    text = describe_plan(plan_run(load_spec(path)))
    lines = text.splitlines()
    start = lines.index("name=muon: optimizer muon")
    assert lines[start + 1].startswith("  muon: ") and "layers.*.mlp.down_proj.weight" in text
    assert lines[start + 2].startswith("  adamw: ") and "embed_tokens.weight" in lines[start + 2]
    assert "optimizer adamw" not in text


def test_muon_is_refused_under_fsdp():
    if not hasattr(torch.distributed.fsdp, "fully_shard"):
        pytest.skip("this torch has no FSDP2")
    with pytest.raises(ValueError, match="muon does not run with parallel: fsdp"):
        TrainConfig(parallel="fsdp", optimizer={"name": "muon"})


@pytest.mark.parametrize("name", ["muon", "fallback"])
def test_a_step_with_a_closure_recomputes_the_loss_and_steps_on_its_gradients(name):
    """`Optimizer.step(closure)`: the closure runs (with autograd on), its loss is returned and
    the update uses the gradients it computed."""
    model, reference = twins()
    inputs = torch.randint(0, 61, (2, 8), generator=torch.Generator().manual_seed(0))
    if name == "muon":
        optimizer = build_optimizer(model, OptimizerConfig(name="muon"), fused=False)
        expected = build_optimizer(reference, OptimizerConfig(name="muon"), fused=False)
    else:
        settings = dict(lr=0.05, weight_decay=0.1, momentum=0.95, nesterov=True, ns_steps=5)
        matrices = [p for n, p in model.named_parameters() if n in expected_muon_names(model)]
        optimizer = NewtonSchulzMuon(matrices, **settings)
        reference_matrices = [
            p for n, p in reference.named_parameters() if n in expected_muon_names(reference)
        ]
        expected = NewtonSchulzMuon(reference_matrices, **settings)

    def closure() -> float:
        model.zero_grad()
        loss = model(inputs, labels=inputs).loss
        loss.backward()
        return loss.item()

    loss = optimizer.step(closure)
    reference.zero_grad()
    reference_loss = reference(inputs, labels=inputs).loss
    reference_loss.backward()
    expected.step()
    assert loss == reference_loss.item()
    assert_same_weights(model, reference)
