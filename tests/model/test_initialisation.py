"""Common random numbers for the initialisation: arms built with one seed start every tensor they
have in common bit-identical, and the dry run states the share (`minimind.model.initialisation`)."""

import pytest
import torch

from minimind.model.config import ModelConfig
from minimind.model.initialisation import shared_fraction
from minimind.model.lm import MiniMindLM
from minimind.run.plan import describe_plan, plan_run
from minimind.spec import load_spec

BASE = {"vocab_size": 64, "dim": 32, "n_layers": 3, "n_heads": 4, "n_kv_heads": 2}


def build(seed: int, **changes) -> MiniMindLM:
    return MiniMindLM(ModelConfig(**{**BASE, **changes}), init_seed=seed)


def same_named_same_shape(a: MiniMindLM, b: MiniMindLM) -> list[str]:
    theirs = dict(b.named_parameters())
    return [
        name
        for name, param in a.named_parameters()
        if name in theirs and theirs[name].shape == param.shape
    ]


@pytest.mark.parametrize(
    "change",
    [
        {"mlp": "relu"},
        {"mlp": {"name": "moe", "n_experts": 4, "top_k": 2}},
        {"attention": "mha"},
        {"attention": "mqa"},
        {"position": "learned"},
        {"position": "none"},
        {"norm": "layernorm"},
        {"block": "postnorm"},
    ],
)
def test_arms_share_every_same_named_same_shape_tensor_bit_for_bit(change):
    # The old single stream failed this for every change of shape: a module of another shape
    # shifted the draws of every tensor after it (0 of 22 shared for MQA).
    reference, arm = build(7, mlp="swiglu"), build(7, **{"mlp": "swiglu", **change})
    common = same_named_same_shape(reference, arm)
    theirs = dict(arm.named_parameters())
    assert "embed_tokens.weight" in common and len(common) >= 4
    for name, param in reference.named_parameters():
        if name in common:
            assert torch.equal(param, theirs[name]), name
    # the dry run's share counts exactly the elements that start equal
    equal = sum(
        p.numel()
        for n, p in reference.named_parameters()
        if n in theirs and p.shape == theirs[n].shape and torch.equal(p, theirs[n])
    )
    total = sum(p.numel() for p in reference.parameters())
    fraction = shared_fraction(reference.initial_draws, arm.initial_draws)
    assert fraction == pytest.approx(equal / total)


def test_a_resized_tensor_is_drawn_whole_and_not_shared():
    narrow, wide = build(3, mlp="relu"), build(3, mlp={"name": "relu", "hidden": 96})
    up_narrow, up_wide = narrow.layers[0].mlp.up_proj.weight, wide.layers[0].mlp.up_proj.weight
    assert up_narrow.shape != up_wide.shape
    rows = min(up_narrow.shape[0], up_wide.shape[0])
    assert not torch.equal(up_narrow[:rows], up_wide[:rows])
    assert torch.equal(narrow.layers[0].attn.q_proj.weight, wide.layers[0].attn.q_proj.weight)
    assert shared_fraction(narrow.initial_draws, wide.initial_draws) < 1.0


def test_the_same_seed_reproduces_and_another_seed_differs():
    first, again, other = build(5), build(5), build(6)
    for (name, a), b, c in zip(
        first.named_parameters(), again.parameters(), other.parameters(), strict=True
    ):
        assert torch.equal(a, b), name
        if a.std() > 0:  # the norms' ones are the same under every seed
            assert not torch.equal(a, c), name
    # without a seed, torch's global generator fixes the draw
    torch.manual_seed(0)
    left = MiniMindLM(ModelConfig(**BASE))
    torch.manual_seed(0)
    right = MiniMindLM(ModelConfig(**BASE))
    assert torch.equal(left.lm_head.weight, right.lm_head.weight)


def test_tensors_drawn_under_another_rule_are_not_counted_shared():
    normal, fan_in = build(1), build(1, init={"scheme": "fan_in"})
    assert shared_fraction(normal.initial_draws, fan_in.initial_draws) < 0.1
    deeper = build(1, n_layers=4)  # another depth scales the output projections differently
    assert not torch.equal(normal.layers[0].attn.o_proj.weight, deeper.layers[0].attn.o_proj.weight)
    assert torch.equal(normal.layers[0].attn.q_proj.weight, deeper.layers[0].attn.q_proj.weight)


def test_the_dry_run_shows_each_variants_share_of_the_baselines_initial_parameters(write_spec):
    ablate = {"model.attention": ["gqa", "mha"], "model.mlp": ["swiglu", "relu"]}
    path = write_spec(ablate=ablate)
    plan = plan_run(load_spec(path))
    text = describe_plan(plan)
    assert "shares init" in text
    column = text.splitlines()[1].split().index("shares")  # the header's words: "shares init"
    shares = {
        line.split()[0]: line.split()[column] for line in text.splitlines()[3:] if "=" in line
    }
    configs = [variant.spec.model_config_obj() for variant in plan.variants]
    models = [MiniMindLM(config, init_seed=0) for config in configs]
    for variant, model in zip(plan.variants, models, strict=True):
        expected = shared_fraction(models[0].initial_draws, model.initial_draws)
        assert shares[variant.name] == f"{expected:.1%}"
    assert shares[plan.variants[0].name] == "100.0%"
    assert any(share != "100.0%" for share in shares.values())
