"""`minimind.hf.convert`: the HF twins it builds compute what the MiniMind modules compute, and
the config it writes for the exported model code keeps every resolved option."""

from dataclasses import replace

import pytest
import torch

pytest.importorskip("transformers")

import registry  # noqa: E402
from minimind import MiniMindLM, ModelConfig  # noqa: E402
from minimind.hf.convert import minimind_config, to_hf_llama, to_hf_mixtral_moe  # noqa: E402


def perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """Norm gains away from 1 and biases away from 0, so a missed copy would show."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


@pytest.mark.parametrize(
    "config",
    [
        ModelConfig.preset("tiny"),  # tied embeddings, gqa, theta 1e4, eps 1e-5
        ModelConfig.preset(  # untied, theta 5e5, eps 1e-6, mqa-like grouping
            "llama-like", vocab_size=300, dim=48, n_layers=2, n_heads=6, n_kv_heads=1
        ),
        ModelConfig.preset(
            "tiny",
            attention={"name": "mha", "bias": True},
            mlp={"name": "swiglu", "hidden": 96, "bias": True},
            head_dim=8,
            tie_embeddings=False,
        ),
    ],
    ids=["tiny", "llama-like", "biases"],
)
def test_llama_twin_gives_the_same_logits_and_loss(config):
    torch.manual_seed(0)
    ours = perturbed(MiniMindLM(config)).eval()
    theirs = to_hf_llama(ours).eval()
    assert theirs.num_parameters() == ours.num_params()
    ids = torch.randint(0, config.vocab_size, (2, 37))
    with torch.no_grad():
        a, b = ours(ids, labels=ids), theirs(ids, labels=ids)
    torch.testing.assert_close(a.logits, b.logits, rtol=0, atol=1e-4)
    torch.testing.assert_close(a.loss, b.loss, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "change",
    [
        {"norm": "layernorm"},
        {"block": "postnorm"},
        {"mlp": "gelu"},
        {"position": "learned"},
        {"position": {"name": "rope", "style": "gptj"}},
        {"dropout": 0.1},
        {"attention": {"name": "gqa", "qk_norm": "rmsnorm"}},
        {"logit_softcap": 30.0},
    ],
)
def test_llama_twin_refuses_a_different_architecture(change):
    with pytest.raises(ValueError, match="no LlamaForCausalLM twin"):
        to_hf_llama(MiniMindLM(ModelConfig.preset("tiny", **change)))


@pytest.mark.parametrize("implementation", ["eager", "grouped_mm"])
def test_mixtral_twin_gives_the_same_outputs_and_gradients(implementation):
    if implementation == "grouped_mm" and not hasattr(torch.nn.functional, "grouped_mm"):
        pytest.skip("torch has no grouped_mm")
    torch.manual_seed(0)
    ours = registry.build("mlp", {"name": "moe", "n_experts": 8, "top_k": 2}, dim=32, dropout=0.0)
    theirs = to_hf_mixtral_moe(ours, implementation)
    x = torch.randn(3, 11, 32)
    upstream = torch.randn(3, 11, 32)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1, y2 = ours(x1), theirs(x2)
    torch.testing.assert_close(y1, y2, rtol=0, atol=1e-5)
    y1.backward(upstream)
    y2.backward(upstream)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=0, atol=1e-5)
    down = torch.stack([e.down_proj.weight.grad for e in ours.experts])
    torch.testing.assert_close(down, theirs.experts.down_proj.grad, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "options", [{"n_shared": 1}, {"top_k": 1}, {"expert": "gelu"}, {"balance": "bias"}]
)
def test_mixtral_twin_refuses_other_moe_kinds(options):
    moe = registry.build("mlp", {"name": "moe", "n_experts": 4, **options}, dim=16, dropout=0.0)
    with pytest.raises(ValueError, match="no MixtralSparseMoeBlock twin"):
        to_hf_mixtral_moe(moe)


def test_the_moe_experts_export_with_the_options_their_alias_fixes(monkeypatch):
    """An expert named by an alias that fixes options (here a plugin's gelu with approximate
    tanh) exports with those options, not the canonical name's defaults."""
    names = {slot: dict(entries) for slot, entries in registry.core._names.items()}
    names["mlp"]["gelu-tanh"] = replace(names["mlp"]["gelu"], fixed={"approximate": "tanh"})
    monkeypatch.setattr(registry.core, "_names", names)
    moe = {"name": "moe", "n_experts": 2, "top_k": 1, "expert": "gelu-tanh"}
    model = MiniMindLM(ModelConfig.preset("tiny", mlp=moe))
    assert model.layers[0].mlp.experts[0].approximate == "tanh"  # as trained
    expert = minimind_config(model).mlp["expert"]
    assert expert["name"] == "gelu" and expert["approximate"] == "tanh"
