"""μP's rules (`minimind.model.mup`) against their formulas at several widths, and μP at its base width
against the standard parametrization."""

from __future__ import annotations

import math

import pytest
import torch

from minimind.model.config import ModelConfig
from minimind.model.lm import MiniMindLM
from minimind.spec.sections import OptimizerConfig, ScheduleConfig
from minimind.training.optim import build_optimizer, build_schedule
from registry.optimizer import muon_split

BASE_WIDTH = 32
SMALL = {"vocab_size": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32}
HIDDEN = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def config(dim: int, mup: bool = True, **changes) -> ModelConfig:
    parametrization = {"name": "mup", "base_width": BASE_WIDTH} if mup else "standard"
    return ModelConfig(**{**SMALL, "dim": dim, "parametrization": parametrization, **changes})


def group_of(optimizer: torch.optim.Optimizer, param: torch.Tensor) -> dict:
    (group,) = [g for g in optimizer.param_groups if any(p is param for p in g["params"])]
    return group


@pytest.mark.parametrize("dim", [32, 64, 128, 256])
@pytest.mark.parametrize("scheme", ["normal", "fan_in"])
def test_initial_draws_follow_the_formulas(dim, scheme):
    m = dim / BASE_WIDTH
    init = {"scheme": scheme}
    model = MiniMindLM(config(dim, init=init, tie_embeddings=False), init_seed=0)
    standard = MiniMindLM(config(dim, mup=False, init=init, tie_embeddings=False), init_seed=0)
    draws, standard_draws = model.initial_draws, standard.initial_draws
    for name, draw in draws.items():
        ours, theirs = draw.scale, standard_draws[name].scale
        if name.endswith(tuple(f"{h}.weight" for h in HIDDEN)):
            # var ∝ 1/fan_in: 0.02·m^-1/2 under `normal`; `fan_in` already is (1/sqrt(fan_in))
            expected = theirs * m**-0.5 if scheme == "normal" else theirs
            assert ours == pytest.approx(expected), name
            fan_in = dict(model.named_parameters())[name].shape[1]
            base_std = 0.02 if scheme == "normal" else (fan_in / m) ** -0.5
            residual = (
                1 / math.sqrt(2 * 2) if name.endswith(("o_proj.weight", "down_proj.weight")) else 1
            )
            assert ours == pytest.approx(base_std * residual * m**-0.5), name
        elif name == "lm_head.weight":
            # the readout keeps its base-width std; the logit multiplier 1/m does the rest
            expected = 0.02 if scheme == "normal" else (dim / m) ** -0.5
            assert ours == pytest.approx(expected)
        else:  # embeddings, norms: the standard draw
            assert draw == standard_draws[name], name
    # the drawn tensors have the std their draws say
    q = dict(model.named_parameters())["layers.0.attn.q_proj.weight"]
    assert q.std().item() == pytest.approx(draws["layers.0.attn.q_proj.weight"].scale, rel=0.1)


@pytest.mark.parametrize("dim", [32, 64, 128, 256])
def test_output_multiplier_and_attention_scale_follow_the_formulas(dim):
    m = dim / BASE_WIDTH
    model = MiniMindLM(config(dim), init_seed=0)
    assert model.output_multiplier == pytest.approx(1 / m)
    head_dim = dim // SMALL["n_heads"]
    base_head_dim = BASE_WIDTH // SMALL["n_heads"]
    scale = math.sqrt(base_head_dim) / head_dim  # 1/head_dim up to a constant as the head grows
    assert model.layers[0].attn.scale == pytest.approx(scale)
    # heads held fixed (more of them as the width grows): the standard 1/sqrt(head_dim)
    fixed = config(
        dim,
        n_heads=dim // 8,
        n_kv_heads=None,
        attention="mha",
        head_dim=8,
        parametrization={"name": "mup", "base_width": BASE_WIDTH, "base_head_dim": 8},
    )
    assert MiniMindLM(fixed, init_seed=0).layers[0].attn.scale == pytest.approx(8**-0.5)
    assert MiniMindLM(config(dim, mup=False), init_seed=0).layers[0].attn.scale is None


def test_the_logits_are_the_head_over_m():
    model = MiniMindLM(config(128, tie_embeddings=False), init_seed=0).eval()
    x = torch.randint(0, 64, (2, 12))
    captured = {}
    model.norm.register_forward_hook(lambda mod, args, out: captured.update(hidden=out))
    logits = model(x).logits
    assert torch.allclose(logits, model.lm_head(captured["hidden"]) / 4, atol=1e-6)
    # the chunked loss sees the same logits
    labels = torch.randint(0, 64, (2, 12))
    whole, chunked = model(x, labels=labels).loss, model(x, labels=labels, loss_chunk_tokens=5).loss
    assert torch.allclose(whole, chunked, atol=1e-6)


@pytest.mark.parametrize("dim", [32, 64, 128, 256])
@pytest.mark.parametrize("tie", [True, False])
def test_adamw_lr_and_weight_decay_multipliers_follow_the_formulas(dim, tie):
    m = dim / BASE_WIDTH
    parametrization = {"name": "mup", "base_width": BASE_WIDTH, "embedding_lr_mult": 3.0}
    model = MiniMindLM(config(dim, tie_embeddings=tie, parametrization=parametrization), 0)
    optimizer = build_optimizer(model, OptimizerConfig(name="adamw", lr=1e-3, weight_decay=0.1))
    for name, param in model.named_parameters():
        group = group_of(optimizer, param)
        if name.endswith(tuple(f"{h}.weight" for h in HIDDEN)):
            assert group["lr"] == pytest.approx(1e-3 / m), name
            assert group["weight_decay"] == pytest.approx(0.1 * m), name  # lr·wd constant
        elif name == "embed_tokens.weight":  # the tied head too: stepped as the embedding
            assert (group["lr"], group["weight_decay"]) == (pytest.approx(3e-3), 0.0)
        elif name == "lm_head.weight":
            assert (group["lr"], group["weight_decay"]) == (pytest.approx(1e-3), 0.1)
        else:  # norm gains
            assert (group["lr"], group["weight_decay"]) == (pytest.approx(1e-3), 0.0), name
    assert ("lm_head.weight" in dict(model.named_parameters())) is not tie


@pytest.mark.parametrize("dim", [32, 128])
def test_muon_keeps_its_lr_and_adamw_takes_the_embedding_and_head_rules(dim):
    parametrization = {"name": "mup", "base_width": BASE_WIDTH, "embedding_lr_mult": 2.0}
    model = MiniMindLM(config(dim, tie_embeddings=False, parametrization=parametrization), 0)
    cfg = OptimizerConfig(name="muon", lr=0.02, weight_decay=0.1, adamw_lr=3e-3)
    optimizer = build_optimizer(model, cfg, fused=False)
    named = dict(model.named_parameters())
    muon_names, _ = muon_split(model)
    for name in muon_names:  # the orthogonalised update needs no 1/m
        group = group_of(optimizer.muon, named[name])
        assert (group["lr"], group["weight_decay"]) == (0.02, 0.1), name
    assert group_of(optimizer.adamw, named["embed_tokens.weight"])["lr"] == pytest.approx(6e-3)
    assert group_of(optimizer.adamw, named["lm_head.weight"])["lr"] == pytest.approx(3e-3)
    assert group_of(optimizer.adamw, named["norm.weight"])["lr"] == pytest.approx(3e-3)


def test_the_schedule_scales_each_groups_own_lr():
    model = MiniMindLM(config(128), init_seed=0)
    optimizer = build_optimizer(model, OptimizerConfig(name="adamw", lr=1e-3))
    base = [g["lr"] for g in optimizer.param_groups]
    assert len(set(base)) > 1
    schedule = build_schedule(optimizer, ScheduleConfig(name="cosine", warmup=4), 20)
    for step in range(1, 10):
        optimizer.step()
        schedule.step()
        factor = schedule.lr_lambdas[0](step)
        assert [g["lr"] for g in optimizer.param_groups] == pytest.approx(
            [b * factor for b in base]
        )


@pytest.mark.parametrize("optimizer_name", ["adamw", "muon"])
@pytest.mark.parametrize("tie", [True, False])
def test_mup_at_its_base_width_is_the_standard_parametrization(optimizer_name, tie):
    # Same initial tensors bit for bit, same logits, same lr and weight decay for every tensor,
    # so the same weights after training steps. What differs: nothing at the base width but the
    # embedding lr when embedding_lr_mult is set (checked above), and the spec's hash.
    mup = MiniMindLM(config(BASE_WIDTH, tie_embeddings=tie), init_seed=3)
    standard = MiniMindLM(config(BASE_WIDTH, mup=False, tie_embeddings=tie), init_seed=3)
    for (name, a), (_, b) in zip(mup.named_parameters(), standard.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    cfg = OptimizerConfig(name=optimizer_name, lr=3e-3, weight_decay=0.1)
    optimizers = [build_optimizer(model, cfg, fused=False) for model in (mup, standard)]
    for param, other in zip(mup.parameters(), standard.parameters(), strict=True):
        ours, theirs = group_of(optimizers[0], param), group_of(optimizers[1], other)
        assert ours["lr"] == theirs["lr"] and ours["weight_decay"] == theirs["weight_decay"]
    torch.manual_seed(0)
    for _ in range(3):
        x = torch.randint(0, 64, (2, 16))
        for model, optimizer in zip((mup, standard), optimizers, strict=True):
            optimizer.zero_grad()
            model(x, labels=x).loss.backward()
            optimizer.step()
    for (name, a), (_, b) in zip(mup.named_parameters(), standard.named_parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), name


def test_a_mup_model_has_no_hugging_face_export():
    pytest.importorskip("transformers")
    from minimind.hf.convert import architecture

    with pytest.raises(ValueError, match=r"^model\.parametrization: a mup model has no"):
        architecture(config(64))


def test_attention_and_its_probe_score_with_the_mup_scale():
    from minimind.training.probes.activations import forward_probes

    model = MiniMindLM(config(128), init_seed=0).eval()
    attention = model.layers[0].attn
    x = torch.randn(1, 10, 128)
    rotate = model.position.rotation(torch.arange(10))
    q, k, v = attention.project(x, rotate)
    k, v = (t.repeat_interleave(2, dim=1) for t in (k, v))  # 4 query heads over 2 kv heads
    scores = q @ k.transpose(-1, -2) * attention.scale
    scores = scores.masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf"))
    expected = attention.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, 10, 128))
    assert torch.allclose(attention(x, rotate), expected, atol=1e-5)
    # the probe's largest logit is over the attention's own scores (every query of 10 tokens
    # from the fifth on: `query_positions` samples the second half)
    ids = torch.randint(0, 64, (1, 10))
    captured = {}
    attention.register_forward_pre_hook(lambda mod, args: captured.update(x=args[0]))
    probes = forward_probes(model, ids, None, queries=10)
    q, k, _ = attention.project(captured["x"], rotate)
    k = k.repeat_interleave(2, dim=1)
    top = ((q @ k.transpose(-1, -2)) * attention.scale)[:, :, 5:]
    masked = top.masked_fill(~torch.ones(5, 10, dtype=torch.bool).tril(diagonal=5), float("-inf"))
    assert probes["attn_max_logit/layer0"].item() == pytest.approx(masked.amax().item(), rel=1e-5)
