"""ModelConfig (validation, presets, counts) and MiniMindLM (HF Llama parity, loss, init, tying)."""

import math

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from transformers import LlamaConfig, LlamaForCausalLM

from minimind import MiniMindLM, ModelConfig
from minimind.model.generation import GREEDY
from minimind.model.loss import IGNORE_INDEX, loss_sums, soft_cap

SMALL = dict(vocab_size=61, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny ops, one thread


def error_of(**fields):
    with pytest.raises(ValidationError) as info:
        ModelConfig(**fields)
    errors = info.value.errors()
    assert len(errors) == 1, errors
    return errors[0]["loc"], errors[0]["msg"]


# --- ModelConfig validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, loc, message",
    [
        (dict(dim=30, n_heads=4), ("dim",), "divisible by n_heads"),
        (dict(n_heads=4, n_kv_heads=3), ("n_kv_heads",), "divisible by n_kv_heads"),
        (dict(head_dim=6, position={"name": "rope", "fraction": 0.5}), ("position",), "even"),
        (dict(dim=36, n_heads=4, position="rope-gptj"), ("position",), "= 9 must be even"),
        (dict(mlp={"name": "moe", "n_experts": 2, "top_k": 3}), ("mlp",), "top_k \\(3\\)"),
        (dict(attention="gqa", n_kv_heads=None), ("attention",), "needs n_kv_heads"),
        (dict(norm="rmsnrom"), ("norm",), "choices: layernorm, rmsnorm; did you mean 'rmsnorm'"),
        (dict(mlp={"name": "swiglu", "hiden": 8}), ("mlp",), "valid options: hidden, bias"),
        (dict(block=3), ("block",), "must be a name or a mapping"),
        (dict(dropout=1.5), ("dropout",), "less than 1"),
        (dict(dim=0), ("dim",), "greater than 0"),
        (dict(n_layer=2), ("n_layer",), "Extra inputs"),
    ],
)
def test_validation_errors_name_the_field(fields, loc, message):
    actual_loc, actual_message = error_of(**fields)
    assert actual_loc == loc
    assert __import__("re").search(message, actual_message), actual_message


def test_head_dim_lifts_the_divisibility_rule():
    config = ModelConfig(dim=30, n_heads=4, n_kv_heads=2, head_dim=8)
    assert config.resolved_head_dim == 8
    model = MiniMindLM(config)
    assert model.layers[0].attn.q_proj.out_features == 32
    assert model.num_params() == config.num_params()


def test_mha_and_mqa_ignore_n_kv_heads_so_attention_can_be_ablated():
    for attention, kv in [("mha", 4), ("mqa", 1), ("gqa", 2)]:
        model = MiniMindLM(ModelConfig(**SMALL, attention=attention))
        assert model.layers[0].attn.n_kv_heads == kv


def test_config_is_frozen_and_replace_revalidates():
    config = ModelConfig.preset("tiny")
    with pytest.raises(ValidationError):
        config.dim = 128
    assert config.replace(norm="layernorm").norm == "layernorm"
    with pytest.raises(ValidationError):
        config.replace(n_kv_heads=3)


def test_component_gives_canonical_name_and_filled_options():
    config = ModelConfig(position={"name": "rope-gptj", "theta": 100}, mlp="moe")
    assert config.component("position") == (
        "rope",
        {"style": "gptj", "theta": 100.0, "fraction": 1.0},
    )
    name, options = config.component("mlp")
    assert name == "moe" and options["n_experts"] == 4 and options["expert"] == "swiglu"
    assert config.component("norm") == ("rmsnorm", {"eps": 1e-5})


def test_round_trip_through_model_dump():
    config = ModelConfig.preset("minimind-moe", dropout=0.1)
    assert ModelConfig(**config.model_dump()) == config


# --- presets and counts -------------------------------------------------------------------------


def test_preset_names_and_unknown_preset():
    assert ModelConfig.preset_names() == [
        "tiny",
        "minimind-26m",
        "minimind-moe",
        "gpt2-small",
        "llama-like",
        "modern",
    ]
    assert ModelConfig.preset("tiny") == ModelConfig()
    with pytest.raises(ValueError, match="did you mean 'gpt2-small'"):
        ModelConfig.preset("gpt2")
    assert ModelConfig.preset("tiny", dim=128).dim == 128


@pytest.mark.parametrize("name", ModelConfig.preset_names())
def test_num_params_equals_the_built_model_for_every_preset(name):
    config = ModelConfig.preset(name)
    with torch.device("meta"):
        model = MiniMindLM(config)
    assert config.num_params() == sum(p.numel() for p in model.parameters())
    if config.component("mlp")[0] != "moe":
        assert config.num_active_params() == config.num_params()


def test_minimind_26m_by_hand():
    config = ModelConfig.preset("minimind-26m")
    embedding = 6400 * 512
    attention = 512 * 512 * 2 + 512 * 128 * 2  # q, o: 8 heads of 64; k, v: 2 heads of 64
    mlp = 3 * 512 * 1408
    expected = embedding + 8 * (attention + mlp + 2 * 512) + 512
    assert config.num_params() == expected == 25_829_888


def test_gpt2_small_by_hand():
    config = ModelConfig.preset("gpt2-small")
    d, v, layers = 768, 50304, 12
    per_layer = (4 * d * d + 4 * d) + (8 * d * d + 4 * d + d) + 2 * (2 * d)
    expected = v * d + 1024 * d + layers * per_layer + 2 * d
    assert config.num_params() == expected == 124_475_904


def test_modern_by_hand():
    config = ModelConfig.preset("modern")
    d, v, layers, head_dim = 768, 50304, 12, 128
    attention = 4 * d * d + 2 * head_dim  # q, k, v, o and the q/k RMSNorm gains
    per_layer = attention + 2 * d * 4 * d + 2 * d  # relu2 hidden 4·d, two block norms
    expected = 2 * v * d + layers * per_layer + d  # untied embedding and head, final norm
    assert config.num_params() == expected == 162_223_872
    assert config.component("attention") == ("mha", {"bias": False, "qk_norm": "rmsnorm"})
    assert config.logit_softcap == 30.0 and config.init.zero_out_proj


def test_moe_active_params_by_hand():
    config = ModelConfig.preset("minimind-moe")
    expert, router = 3 * 512 * 1408, 512 * 4
    assert config.num_params() - config.num_active_params() == 8 * 2 * expert
    dense = ModelConfig.preset("minimind-26m")
    assert config.num_active_params() == dense.num_params() + 8 * (router + 2 * expert)


def test_flops_per_token_formula():
    config = ModelConfig(**SMALL)  # tied, swiglu hidden 128, rmsnorm, prenorm
    body = 2 * ((2 * 32 * 32 + 2 * 32 * 16) + 3 * 32 * 128 + 2 * 32) + 32
    expected = 6 * (body + 64 * 32) + 12 * 2 * 4 * 8 * 20  # the head computes 61 padded to 64
    assert config.flops_per_token(20) == expected
    untied = config.replace(tie_embeddings=False, position="learned")
    assert untied.flops_per_token(20) == expected  # neither the table nor untying changes FLOPs
    moe = config.replace(mlp={"name": "moe", "n_experts": 8, "top_k": 2, "hidden": 16})
    moe_body = 2 * ((2 * 32 * 32 + 2 * 32 * 16) + 32 * 8 + 2 * 3 * 32 * 16 + 2 * 32) + 32
    assert moe.flops_per_token(20) == 6 * (moe_body + 64 * 32) + 12 * 2 * 4 * 8 * 20
    unpadded = config.replace(pad_vocab_multiple=1)
    assert unpadded.flops_per_token(20) == expected - 6 * 3 * 32


# --- 5. whole-model parity with HF Llama --------------------------------------------------------


@pytest.mark.parametrize("tied", [False, True])
def test_llama_like_matches_hf_llama_logits(tied):
    torch.manual_seed(0)
    config = ModelConfig(
        **SMALL,
        norm={"name": "rmsnorm", "eps": 1e-6},
        position={"name": "rope", "style": "neox", "theta": 500.0},
        attention="gqa",
        mlp={"name": "swiglu", "hidden": 96},
        block="prenorm",
        tie_embeddings=tied,
    )
    ours = MiniMindLM(config).eval()
    hf_config = LlamaConfig(
        vocab_size=64,  # 61 padded to 64: the tables have the same shape
        hidden_size=32,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
        tie_word_embeddings=tied,
        attn_implementation="eager",
    )
    hf = LlamaForCausalLM(hf_config).eval()
    state = {
        "model.embed_tokens.weight": ours.embed_tokens.weight,
        "model.norm.weight": ours.norm.weight,
    }
    state["lm_head.weight"] = ours.lm_head.weight
    for i, layer in enumerate(ours.layers):
        prefix = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            state[prefix + f"self_attn.{proj}.weight"] = getattr(layer.attn, proj).weight
        for proj in ("gate_proj", "up_proj", "down_proj"):
            state[prefix + f"mlp.{proj}.weight"] = getattr(layer.mlp, proj).weight
        # our norms are random too, so that a swapped pair would show
        with torch.no_grad():
            layer.attn_norm.weight.uniform_(0.5, 1.5)
            layer.mlp_norm.weight.uniform_(0.5, 1.5)
        state[prefix + "input_layernorm.weight"] = layer.attn_norm.weight
        state[prefix + "post_attention_layernorm.weight"] = layer.mlp_norm.weight
    missing, unexpected = hf.load_state_dict(
        {k: v.detach() for k, v in state.items()}, strict=False
    )
    assert not unexpected and set(missing) <= {"lm_head.weight"}

    ids = torch.randint(0, 61, (2, 17))
    with torch.no_grad():
        ours_out = ours(ids, labels=ids)
        hf_out = hf(input_ids=ids, labels=ids)
    torch.testing.assert_close(ours_out.logits, hf_out.logits, rtol=0, atol=1e-4)
    torch.testing.assert_close(ours_out.loss, hf_out.loss, rtol=0, atol=1e-5)


# --- forward outputs, init, tying ---------------------------------------------------------------


def test_loss_is_shifted_cross_entropy_ignoring_minus_100():
    torch.manual_seed(0)
    model = MiniMindLM(ModelConfig(**SMALL))
    ids = torch.randint(0, 61, (2, 9))
    labels = ids.clone()
    labels[0, 3:5] = -100
    out = model(ids, labels=labels)
    assert out.logits.shape == (2, 9, 64)  # 61 padded to a multiple of 64; softmax over all 64
    total, count = 0.0, 0
    for b in range(2):
        for t in range(8):
            target = labels[b, t + 1].item()
            if target != -100:
                total += F.cross_entropy(out.logits[b, t], torch.tensor(target)).item()
                count += 1
    assert count == 14
    assert out.loss.item() == pytest.approx(total / count, rel=1e-5)
    assert model(ids).loss is None
    assert out.aux_loss.dim() == 0 and out.aux_loss.item() == 0
    assert model.moe_load() is None


def test_moe_model_reports_aux_loss_and_load():
    torch.manual_seed(0)
    config = ModelConfig(**SMALL, mlp={"name": "moe", "n_experts": 4, "aux_loss_coef": 0.1})
    model = MiniMindLM(config)
    out = model(torch.randint(0, 61, (2, 9)))
    per_layer = [layer.mlp.aux_loss for layer in model.layers]
    assert out.aux_loss.item() == pytest.approx(sum(a.item() for a in per_layer))
    assert out.aux_loss.item() > 0
    load = model.moe_load()
    assert load.shape == (2, 4)
    torch.testing.assert_close(load.sum(1), torch.ones(2))


def test_init_scales_residual_output_projections():
    torch.manual_seed(0)
    n_layers = 4
    config = ModelConfig(vocab_size=64, dim=256, n_layers=n_layers, n_heads=4, mlp="relu")
    model = MiniMindLM(config)
    residual_std = 0.02 / math.sqrt(2 * n_layers)
    layer = model.layers[1]
    for weight, std in [
        (layer.attn.q_proj.weight, 0.02),
        (layer.attn.k_proj.weight, 0.02),
        (layer.mlp.up_proj.weight, 0.02),
        (layer.attn.o_proj.weight, residual_std),
        (layer.mlp.down_proj.weight, residual_std),
        (model.embed_tokens.weight, 0.02),
    ]:
        assert weight.std().item() == pytest.approx(std, rel=0.05)
        assert abs(weight.mean().item()) < std / 10
    assert torch.equal(layer.attn_norm.weight, torch.ones(256))


@pytest.mark.parametrize("zero_out_proj", [False, True])
@pytest.mark.parametrize("scheme", ["fan_in", "torch_default"])
def test_init_schemes_and_zero_output_projections(scheme, zero_out_proj):
    torch.manual_seed(0)
    n_layers, dim = 2, 256
    init = {"scheme": scheme, "zero_out_proj": zero_out_proj}
    config = ModelConfig(
        vocab_size=64, dim=dim, n_layers=n_layers, n_heads=4, mlp="relu", init=init
    )
    model = MiniMindLM(config)
    layer = model.layers[1]
    # fan_in: N(0, 1/fan_in); torch_default: nn.Linear's U(±1/sqrt(fan_in)), std 1/sqrt(3·fan_in)
    factor = 1.0 if scheme == "fan_in" else 3**-0.5
    residual = 1 / math.sqrt(2 * n_layers) if scheme == "fan_in" else 1.0
    cases = [
        (layer.attn.q_proj.weight, factor / math.sqrt(dim)),
        (layer.mlp.up_proj.weight, factor / math.sqrt(dim)),
        (model.embed_tokens.weight, 0.02 if scheme == "fan_in" else 1.0),
    ]
    if not zero_out_proj:
        cases += [
            (layer.attn.o_proj.weight, residual * factor / math.sqrt(dim)),
            (layer.mlp.down_proj.weight, residual * factor / math.sqrt(4 * dim)),
        ]
    for weight, std in cases:
        assert weight.std().item() == pytest.approx(std, rel=0.05)
    if scheme == "torch_default":
        bound = 1 / math.sqrt(dim)
        assert layer.attn.q_proj.weight.abs().max() <= bound
    if zero_out_proj:
        for name, param in model.named_parameters():
            assert (param.count_nonzero() == 0) == name.endswith(
                ("o_proj.weight", "down_proj.weight")
            )


def test_init_scheme_is_validated():
    loc, message = error_of(init={"scheme": "xavier"})
    assert loc == ("init", "scheme") and "normal" in message


def test_moe_expert_down_projections_are_scaled_too():
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=64, dim=256, n_layers=8, n_heads=4, mlp={"name": "moe", "n_shared": 1}
    )
    model = MiniMindLM(config)
    moe = model.layers[0].mlp
    for expert in (moe.experts[0], moe.shared[0]):
        assert expert.down_proj.weight.std().item() == pytest.approx(0.02 / 4, rel=0.05)
        assert expert.up_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_tied_and_untied_embeddings():
    tied = MiniMindLM(ModelConfig(**SMALL))
    assert tied.lm_head.weight is tied.embed_tokens.weight
    untied = MiniMindLM(ModelConfig(**SMALL, tie_embeddings=False))
    assert untied.lm_head.weight is not untied.embed_tokens.weight
    assert untied.num_params() - tied.num_params() == 64 * 32  # 61 padded to 64


def test_postnorm_has_no_final_norm():
    model = MiniMindLM(ModelConfig(**SMALL, block="postnorm"))
    assert isinstance(model.norm, torch.nn.Identity)
    assert model.num_params() == ModelConfig(**SMALL, block="postnorm").num_params()


def test_forward_rejects_sequences_longer_than_max_seq_len():
    model = MiniMindLM(ModelConfig(**SMALL))
    with pytest.raises(ValueError, match="exceeds max_seq_len 32"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_dropout_is_active_only_in_training():
    torch.manual_seed(0)
    model = MiniMindLM(ModelConfig(**SMALL, dropout=0.5))
    ids = torch.randint(0, 61, (1, 8))
    model.train()
    assert not torch.equal(model(ids).logits, model(ids).logits)
    model.eval()
    assert torch.equal(model(ids).logits, model(ids).logits)


@pytest.mark.parametrize("position", ["rope-neox", "rope-gptj", "learned", "sinusoidal"])
def test_module_conversions_keep_working(position):
    # nn.Module.to()/.double() walk every submodule through `_apply`; a component must not
    # shadow that name, or moving a model between devices and dtypes breaks.
    cfg = ModelConfig.preset("tiny", position=position, vocab_size=64, dim=32, n_layers=1)
    model = MiniMindLM(cfg).to(torch.float64)
    ids = torch.randint(0, 64, (1, 5))
    assert model(ids).logits.dtype == torch.float64


# --- padded vocabulary --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vocab, multiple, padded",
    [(50257, 64, 50304), (50257, 1, 50257), (50304, 64, 50304), (61, 64, 64), (64, 64, 64)],
)
def test_padded_vocab_size_rounds_up_to_the_multiple(vocab, multiple, padded):
    config = ModelConfig(vocab_size=vocab, pad_vocab_multiple=multiple)
    assert config.padded_vocab_size == padded
    assert config.vocab_size == vocab  # the real ids are unchanged


def test_pad_vocab_multiple_defaults_to_64_and_must_be_positive():
    assert ModelConfig().pad_vocab_multiple == 64
    assert error_of(pad_vocab_multiple=0) == (
        ("pad_vocab_multiple",),
        "Input should be greater than or equal to 1",
    )


@pytest.mark.parametrize("tied", [True, False])
def test_tables_and_logits_have_the_padded_shape(tied):
    config = ModelConfig(**{**SMALL, "vocab_size": 100}, tie_embeddings=tied)
    model = MiniMindLM(config)
    assert model.embed_tokens.weight.shape == (128, 32)
    assert model.lm_head.weight.shape == (128, 32)
    ids = torch.randint(0, 100, (2, 7))
    out = model(ids, labels=ids)
    assert out.logits.shape == (2, 7, 128)
    # the loss is a softmax over all 128 logits, padded ones included (nanoGPT's semantics)
    expected = F.cross_entropy(out.logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("position", ["rope", "learned"])
def test_num_params_counts_the_padded_rows_for_an_odd_vocab(tied, position):
    config = ModelConfig(**{**SMALL, "vocab_size": 50257}, tie_embeddings=tied, position=position)
    with torch.device("meta"):
        model = MiniMindLM(config)
    assert config.num_params() == model.num_params() == config.num_active_params()
    unpadded = config.replace(pad_vocab_multiple=1)
    tables = 1 if tied else 2
    assert config.num_params() - unpadded.num_params() == tables * (50304 - 50257) * 32


def test_minimind_26m_is_unchanged_by_padding():
    # every preset's vocabulary is already a multiple of 64, so the default pads nothing
    for name in ModelConfig.preset_names():
        config = ModelConfig.preset(name)
        assert config.padded_vocab_size == config.vocab_size
    assert MiniMindLM(ModelConfig.preset("minimind-26m")).num_params() == 25_829_888


# --- logit soft-capping and z-loss ---------------------------------------------------------------


def test_softcap_caps_the_logits_in_the_loss_and_in_generation():
    torch.manual_seed(0)
    plain = MiniMindLM(ModelConfig(vocab_size=50, dim=32, n_layers=1, n_heads=4))
    capped = MiniMindLM(plain.config.replace(logit_softcap=0.5))
    capped.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 50, (2, 9))
    raw = plain(ids).logits.detach().requires_grad_()
    out = capped(ids, labels=ids)
    expected = 0.5 * torch.tanh(raw / 0.5)
    torch.testing.assert_close(out.logits, expected, rtol=0, atol=1e-6)
    assert out.logits.abs().max() < 0.5
    # the loss and its gradient through the cap, against the written-out derivatives:
    # d CE / d capped = (softmax - onehot) / n, d capped / d raw = 1 - tanh²(raw / cap)
    targets = torch.cat([ids[:, 1:], ids[:, :1]], dim=1)  # the last position has no target
    loss = F.cross_entropy(soft_cap(raw, 0.5)[:, :-1].flatten(0, 1), targets[:, :-1].flatten())
    assert loss.item() == pytest.approx(out.loss.item(), rel=1e-6)
    loss.backward()
    onehot = F.one_hot(targets, raw.size(-1)).float()
    grad = (expected.softmax(-1) - onehot) / (2 * 8) * (1 - torch.tanh(raw / 0.5) ** 2)
    grad[:, -1] = 0
    torch.testing.assert_close(raw.grad, grad, rtol=0, atol=1e-7)
    # generation reads the capped logits: greedy decoding picks their argmax
    with torch.no_grad():
        step = capped.generate(ids[:, :4], 1, GREEDY)[:, -1]
        assert torch.equal(step, capped(ids[:, :4]).logits[:, -1].argmax(-1))


def test_z_loss_is_squared_logsumexp_summed_over_the_targets():
    torch.manual_seed(0)
    logits = (torch.randn(10, 7) * 3).requires_grad_()
    targets = torch.randint(0, 7, (10,))
    targets[3] = IGNORE_INDEX
    cross_entropy, z_sum = loss_sums(logits, targets, with_z_loss=True)
    # logsumexp written out, over the 9 tokens that have a target
    lse = torch.log(torch.exp(logits.detach()).sum(-1))
    has_target = targets != IGNORE_INDEX
    assert z_sum.item() == pytest.approx((lse[has_target] ** 2).sum().item(), rel=1e-6)
    expected_ce = F.cross_entropy(logits[has_target], targets[has_target], reduction="sum")
    assert cross_entropy.item() == pytest.approx(expected_ce.item(), rel=1e-6)
    z_sum.backward()
    # d/dz Σ lse² = 2 · lse · softmax(z) on the counted tokens, 0 elsewhere
    expected = 2 * lse[:, None] * logits.detach().softmax(-1) * has_target[:, None]
    torch.testing.assert_close(logits.grad, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("chunk", [None, 5])
def test_the_model_reports_the_mean_z_loss_of_its_capped_logits(chunk):
    torch.manual_seed(0)
    model = MiniMindLM(ModelConfig(vocab_size=50, dim=32, n_layers=1, n_heads=4, logit_softcap=3.0))
    ids = torch.randint(0, 50, (2, 9))
    logits = model(ids).logits
    out = model(ids, labels=ids, loss_chunk_tokens=chunk, with_z_loss=True)
    lse = logits[:, :-1].float().logsumexp(-1)  # the last position has no target
    assert out.z_loss.item() == pytest.approx((lse**2).mean().item(), rel=1e-5)
    assert model(ids, labels=ids).z_loss is None
