"""The optimizer's parameter groups and the lr schedules, against hand-computed values."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from minimind.model.lm import MiniMindLM
from minimind.spec.sections import OptimizerConfig, ScheduleConfig
from minimind.training.optim import build_optimizer, build_schedule, lr_multiplier
from registry.optimizer import param_groups


def schedule(
    name: str, warmup: int = 10, min_lr_ratio: float = 0.1, decay_fraction: float = 0.2
) -> ScheduleConfig:
    return ScheduleConfig(
        name=name, warmup=warmup, min_lr_ratio=min_lr_ratio, decay_fraction=decay_fraction
    )


@pytest.mark.parametrize("name", ["cosine", "linear", "constant", "wsd"])
def test_warmup_is_linear_and_starts_above_zero(name):
    cfg = schedule(name)
    assert [lr_multiplier(s, cfg, 110) for s in range(10)] == pytest.approx(
        [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    )


def test_cosine_key_steps():
    # 110 steps, warmup 10: the decay spans steps 10..109 (99 intervals).
    cfg = schedule("cosine")
    assert lr_multiplier(10, cfg, 110) == pytest.approx(1.0)
    assert lr_multiplier(10 + 33, cfg, 110) == pytest.approx(0.1 + 0.9 * 0.75)  # cos(pi/3) = 0.5
    assert lr_multiplier(109, cfg, 110) == pytest.approx(0.1)
    assert lr_multiplier(500, cfg, 110) == pytest.approx(0.1)  # past the end: stays at the floor


def test_linear_key_steps():
    cfg = schedule("linear", min_lr_ratio=0.0)
    assert lr_multiplier(10, cfg, 110) == pytest.approx(1.0)
    assert lr_multiplier(43, cfg, 110) == pytest.approx(1 - 33 / 99)
    assert lr_multiplier(109, cfg, 110) == pytest.approx(0.0)


def test_constant_ignores_the_floor():
    cfg = schedule("constant", min_lr_ratio=0.1)
    assert [lr_multiplier(s, cfg, 110) for s in (10, 50, 109)] == [1.0, 1.0, 1.0]


def test_wsd_is_stable_then_decays_over_the_last_fraction():
    # 100 steps, decay_fraction 0.2 -> stable up to step 79, linear decay over steps 80..99.
    cfg = schedule("wsd", warmup=10, min_lr_ratio=0.0, decay_fraction=0.2)
    assert [lr_multiplier(s, cfg, 100) for s in (10, 50, 79, 80)] == pytest.approx([1, 1, 1, 1])
    assert lr_multiplier(80 + 19 / 2, cfg, 100) == pytest.approx(0.5)
    assert lr_multiplier(99, cfg, 100) == pytest.approx(0.0)


def test_unknown_schedule_is_an_error():
    with pytest.raises(ValueError, match="train.schedule.name"):
        # The spec rejects the name first; a config built without validation still fails here.
        unknown = ScheduleConfig.model_construct(name="step")
        build_schedule(torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=1.0), unknown, 10)


def test_lambda_lr_applies_the_multiplier_and_its_state_is_plain():
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=2.0)
    cfg = schedule("cosine", warmup=2)
    sched = build_schedule(opt, cfg, 20)
    seen = []
    for _ in range(20):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([2.0 * lr_multiplier(s, cfg, 20) for s in range(20)])
    state = sched.state_dict()
    assert state["lr_lambdas"] == [None] and state["last_epoch"] == 20


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(10, 4)
        self.pos_embed = nn.Parameter(torch.zeros(8, 4))  # a raw table, found by its name
        self.norm = nn.LayerNorm(4)
        self.proj = nn.Linear(4, 4, bias=True)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.tok.weight  # tied
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)


def test_param_groups_exclude_norms_biases_and_embeddings():
    model = Toy()
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    ids = lambda ps: {id(p) for p in ps}  # noqa: E731
    assert ids(decay["params"]) == {id(model.proj.weight)}
    assert ids(no_decay["params"]) == ids(
        [model.tok.weight, model.pos_embed, model.norm.weight, model.norm.bias, model.proj.bias]
    )


def test_build_optimizer_is_adamw_with_the_spec_settings():
    cfg = OptimizerConfig(lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8)
    opt = build_optimizer(Toy(), cfg)
    assert isinstance(opt, torch.optim.AdamW)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    group = opt.param_groups[0]
    assert group["lr"] == 3e-3 and group["betas"] == (0.9, 0.95) and group["eps"] == 1e-8
    assert group["foreach"] is True and not group["fused"]


@pytest.mark.parametrize("shape", [(64, 128), (128, 64), (96, 96), (384, 128)])
@pytest.mark.parametrize("ns_steps", [1, 5])
def test_newton_schulz_flops_equal_torchs_flop_counter(shape, ns_steps):
    """The formula against torch's own count of the iteration's matrix multiplies."""
    from torch.utils.flop_counter import FlopCounterMode

    from registry.optimizer import newton_schulz_flops, zeropower_via_newtonschulz

    with FlopCounterMode(display=False) as counter:
        zeropower_via_newtonschulz(torch.randn(shape), ns_steps)
    assert newton_schulz_flops(shape, ns_steps) == counter.get_total_flops()


def test_optimizer_flops_count_muons_hidden_matrices_only():
    from minimind.model.config import ModelConfig
    from minimind.training.optim import optimizer_flops_per_step
    from registry.optimizer import newton_schulz_flops

    cfg = ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=256, max_seq_len=64)
    assert optimizer_flops_per_step(cfg, OptimizerConfig(name="adamw", lr=1e-3)) == 0
    muon = OptimizerConfig(name="muon", lr=1e-2, ns_steps=3)
    # per layer: q and o [64, 64], k and v [32, 64], the MLP's three [hidden, 64] or [64, hidden];
    # not the embedding (tied head) and the norms
    with torch.device("meta"):
        hidden = MiniMindLM(cfg).layers[0].mlp.up_proj.weight.shape[0]
    per_layer = [(64, 64), (64, 64), (32, 64), (32, 64), (hidden, 64), (hidden, 64), (64, hidden)]
    expected = 2 * sum(newton_schulz_flops(s, 3) for s in per_layer)
    assert optimizer_flops_per_step(cfg, muon) == expected
