"""Every combination of the built-in components (2 norms x 5 positions x 3 attentions x 5 mlps x
2 blocks = 300 tiny models): causal, finite, every parameter trained, exact parameter count, and a
KV cache equivalent to the full forward pass. The options that change the model around its
components (QK-norm, logit soft-capping, init schemes, the MoE's balance scope) each run with
every position x attention pair, the other slots taking turns."""

import itertools

import pytest
import torch

import registry
from minimind import MiniMindLM, ModelConfig
from minimind.model.generation import GREEDY

NORMS = ["layernorm", "rmsnorm"]
POSITIONS = ["none", "learned", "sinusoidal", "rope-neox", "rope-gptj"]
ATTENTIONS = ["mha", "mqa", "gqa"]
MLPS = ["relu", "relu2", "gelu", "swiglu", "moe"]
BLOCKS = ["prenorm", "postnorm"]
COMBINATIONS = list(itertools.product(NORMS, POSITIONS, ATTENTIONS, MLPS, BLOCKS))
VOCAB, LENGTH = 61, 10
OPTIONS = {  # name -> (attention options, moe options, ModelConfig fields)
    "qk-rmsnorm": ({"qk_norm": "rmsnorm"}, {}, {}),
    "qk-layernorm": ({"qk_norm": "layernorm"}, {}, {}),
    "softcap": ({}, {}, {"logit_softcap": 2.0}),
    "fan-in-zero-out": ({}, {}, {"init": {"scheme": "fan_in", "zero_out_proj": True}}),
    "torch-default-init": ({}, {}, {"init": {"scheme": "torch_default"}}),
    "sequence-aux": ({}, {"aux_scope": "sequence"}, {}),
}
OPTION_CASES = [
    (
        option,
        (
            NORMS[i % 2],
            position,
            attention,
            "moe" if option == "sequence-aux" else MLPS[i % len(MLPS)],
            BLOCKS[i // 2 % 2],
        ),
    )
    for option in OPTIONS
    for i, (position, attention) in enumerate(itertools.product(POSITIONS, ATTENTIONS))
]
ALL_CASES = [(None, c) for c in COMBINATIONS] + OPTION_CASES
CASE_IDS = ["-".join(c) if o is None else f"{o}:{'-'.join(c)}" for o, c in ALL_CASES]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny ops, one thread


def build(combination, option: str | None = None) -> MiniMindLM:
    norm, position, attention, mlp, block = combination
    attention_options, moe_options, fields = OPTIONS[option] if option else ({}, {}, {})
    moe = {"name": "moe", "n_experts": 4, "top_k": 2, "n_shared": 1, "hidden": 32, **moe_options}
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=VOCAB,
        dim=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        max_seq_len=16,
        norm=norm,
        position=position,
        attention={"name": attention, **attention_options},
        mlp=moe if mlp == "moe" else mlp,
        block=block,
        **fields,
    )
    return MiniMindLM(config)


def test_the_combinations_cover_every_registered_component():
    """A component added to the registry must join the matrix (rope counts once per style)."""
    resolved_positions = {registry.resolve("position", p)[0] for p in POSITIONS}
    assert resolved_positions == set(registry.choices("position"))
    for slot, names in (
        ("norm", NORMS),
        ("attention", ATTENTIONS),
        ("mlp", MLPS),
        ("block", BLOCKS),
    ):
        assert set(names) == set(registry.choices(slot)), slot
    assert len(COMBINATIONS) == 300


def test_every_option_meets_every_position_and_attention():
    for option in OPTIONS:
        pairs = {(c[1], c[2]) for o, c in OPTION_CASES if o == option}
        assert pairs == set(itertools.product(POSITIONS, ATTENTIONS)), option


@pytest.mark.parametrize("option, combination", ALL_CASES, ids=CASE_IDS)
def test_causal_finite_and_every_parameter_gets_a_gradient(option, combination):
    model = build(combination, option)
    assert model.config.num_params() == sum(p.numel() for p in model.parameters())
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, LENGTH), generator=generator)
    changed_at = 6
    altered = ids.clone()
    altered[:, changed_at] = (ids[:, changed_at] + 1) % VOCAB

    out = model(ids, labels=ids)
    with torch.no_grad():
        altered_logits = model(altered).logits
    torch.testing.assert_close(
        altered_logits[:, :changed_at], out.logits[:, :changed_at].detach(), rtol=0, atol=1e-5
    )
    assert not torch.allclose(altered_logits[:, changed_at], out.logits[:, changed_at], atol=1e-4)

    (out.loss + out.aux_loss).backward()
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
    for name, param in model.named_parameters():
        assert param.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(param.grad).all(), f"{name} has a non-finite gradient"


@pytest.mark.parametrize("option, combination", ALL_CASES, ids=CASE_IDS)
def test_kv_cache_equals_full_forward_and_generate_agrees(option, combination):
    model = build(combination, option).eval()
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(0, VOCAB, (2, LENGTH), generator=generator)
    caches = {"dynamic": model.new_cache, "static": lambda: model.new_static_cache(LENGTH + 3)}
    with torch.no_grad():
        full = model(ids).logits
        for kind, new_cache in caches.items():
            cache = new_cache()
            steps = [model(ids[:, :4], cache=cache).logits]  # prefill
            steps.append(model(ids[:, 4:6], cache=cache).logits)  # two at once: bottom-right mask
            steps += [model(ids[:, t : t + 1], cache=cache).logits for t in range(6, LENGTH)]
            assert len(cache) == LENGTH, kind
            # rtol: torch_default init gives logits of ~40, where float32 rounding alone is ~1e-5
            torch.testing.assert_close(
                torch.cat(steps, dim=1), full, rtol=1e-6, atol=1e-5, msg=kind
            )

    prompt = ids[:, :5]
    uncached = model.generate(prompt, 6, GREEDY, cache="none")
    assert uncached.shape == (2, 11)
    for kind in caches:
        assert torch.equal(model.generate(prompt, 6, GREEDY, cache=kind), uncached), kind
