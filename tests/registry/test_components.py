"""Registry components against independent references: torch norms, HF transformers' RoPE
functions, the sinusoid formula, and attention written out with plain tensor ops."""

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import GPTNeoXConfig
from transformers.models.gpt_neox.modeling_gpt_neox import (
    GPTNeoXRotaryEmbedding,
)
from transformers.models.gpt_neox.modeling_gpt_neox import (
    apply_rotary_pos_emb as neox_apply_rotary_pos_emb,
)
from transformers.models.gptj.modeling_gptj import (
    apply_rotary_pos_emb as gptj_apply_rotary_pos_emb,
)
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions

import registry
from minimind.model.kv_cache import KVCacheLayer
from registry.attention import causal_mask
from registry.declarations.mlp import swiglu_hidden

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny ops, one thread


def identity_rotate(q, k):
    return q, k


# --- 1. norms ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_matches_torch(bias):
    torch.manual_seed(0)
    ours = registry.build("norm", {"name": "layernorm", "eps": 1e-6, "bias": bias}, dim=24)
    reference = torch.nn.LayerNorm(24, eps=1e-6, bias=bias)
    with torch.no_grad():
        reference.weight.normal_()
        if bias:
            reference.bias.normal_()
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(3, 5, 24) * 3 + 1
    torch.testing.assert_close(ours(x), reference(x), rtol=0, atol=1e-6)


def test_rmsnorm_matches_torch():
    torch.manual_seed(0)
    ours = registry.build("norm", {"name": "rmsnorm", "eps": 1e-6}, dim=24)
    reference = torch.nn.RMSNorm(24, eps=1e-6)
    with torch.no_grad():
        reference.weight.normal_()
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(3, 5, 24) * 3 + 1
    torch.testing.assert_close(ours(x), reference(x), rtol=0, atol=1e-6)
    # and the definition itself: x / sqrt(mean(x^2) + eps) * w
    by_hand = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * reference.weight
    torch.testing.assert_close(ours(x), by_hand, rtol=0, atol=1e-5)


def test_norm_param_counts():
    for spec, expected in [
        ("rmsnorm", 24),
        ("layernorm", 48),
        ({"name": "layernorm", "bias": False}, 24),
    ]:
        module = registry.build("norm", spec, dim=24)
        assert sum(p.numel() for p in module.parameters()) == expected
        assert registry.count_params("norm", spec, dim=24) == expected


# --- 2. RoPE -----------------------------------------------------------------------------------


def rope(style, head_dim, theta=10000.0, fraction=1.0):
    spec = {"name": "rope", "style": style, "theta": theta, "fraction": fraction}
    return registry.build("position", spec, dim=4 * head_dim, head_dim=head_dim, max_seq_len=64)


@pytest.mark.parametrize("fraction", [1.0, 0.5, 0.25])
def test_rope_neox_matches_hf_gpt_neox(fraction):
    """Element by element against HF GPT-NeoX's rotary embedding and apply_rotary_pos_emb,
    including partial rotary (`fraction` == GPT-NeoX's rotary_pct) and an offset start."""
    torch.manual_seed(0)
    head_dim, n_heads, theta = 32, 4, 500.0
    config = GPTNeoXConfig(
        hidden_size=head_dim * n_heads,
        num_attention_heads=n_heads,
        rotary_pct=fraction,
        rotary_emb_base=theta,
    )
    assert config.rope_parameters["partial_rotary_factor"] == fraction
    assert config.rope_parameters["rope_theta"] == theta
    positions = torch.arange(7, 7 + 9)
    q, k = torch.randn(2, n_heads, 9, head_dim), torch.randn(2, 2, 9, head_dim)
    cos, sin = GPTNeoXRotaryEmbedding(config)(q, positions[None].expand(2, -1))
    assert cos.shape[-1] == int(head_dim * fraction)
    expected_q, expected_k = neox_apply_rotary_pos_emb(q, k, cos, sin)

    actual_q, actual_k = rope("neox", head_dim, theta, fraction).rotate(q, k, positions)
    torch.testing.assert_close(actual_q, expected_q, rtol=0, atol=1e-5)
    torch.testing.assert_close(actual_k, expected_k, rtol=0, atol=1e-5)
    # the unrotated channels pass through untouched
    rotated = int(head_dim * fraction)
    assert torch.equal(actual_q[..., rotated:], q[..., rotated:])


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rope_gptj_matches_hf_gptj(fraction):
    """Against HF GPT-J: sincos table, gather by position, apply_rotary_pos_emb on [B, T, H, hd]."""
    torch.manual_seed(0)
    head_dim, n_heads, length = 16, 3, 10
    rotated = int(head_dim * fraction)
    positions = torch.arange(3, 3 + length)
    q, k = torch.randn(2, n_heads, length, head_dim), torch.randn(2, 1, length, head_dim)
    sincos = create_sinusoidal_positions(64, rotated)[positions][None]  # [1, T, rotated]
    sin, cos = torch.split(sincos, rotated // 2, dim=-1)

    def hf(x):  # HF GPT-J works on [B, T, H, hd] and rotates the first rotary_dim channels
        x = x.transpose(1, 2)
        out = torch.cat(
            (gptj_apply_rotary_pos_emb(x[..., :rotated], sin, cos), x[..., rotated:]), dim=-1
        )
        return out.transpose(1, 2)

    actual_q, actual_k = rope("gptj", head_dim, fraction=fraction).rotate(q, k, positions)
    torch.testing.assert_close(actual_q, hf(q), rtol=0, atol=1e-5)
    torch.testing.assert_close(actual_k, hf(k), rtol=0, atol=1e-5)


def test_rope_styles_differ_in_layout_only():
    """gptj on interleaved channels equals neox on the same channels split into halves."""
    torch.manual_seed(0)
    head_dim = 8
    q, k = torch.randn(1, 2, 5, head_dim), torch.randn(1, 2, 5, head_dim)
    positions = torch.arange(5)
    # channel order (0, 2, 4, 6, 1, 3, 5, 7) turns adjacent pairs into (i, i + d/2) pairs
    perm = torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))
    gq, gk = rope("gptj", head_dim).rotate(q, k, positions)
    nq, nk = rope("neox", head_dim).rotate(q[..., perm], k[..., perm], positions)
    torch.testing.assert_close(gq[..., perm], nq, rtol=0, atol=1e-6)
    assert not torch.allclose(gq, rope("neox", head_dim).rotate(q, k, positions)[0], atol=1e-3)


@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_rope_score_depends_only_on_relative_position(style):
    torch.manual_seed(0)
    module = rope(style, 16, fraction=0.5)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(m, n):
        rq, _ = module.rotate(q, k, torch.tensor([m]))
        _, rk = module.rotate(q, k, torch.tensor([n]))
        return (rq * rk).sum().item()

    for m, n in [(5, 2), (3, 3), (1, 4)]:
        for shift in (1, 7, 40):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(6, 2), abs=1e-3)


def test_rope_aliases_fix_the_style():
    assert registry.resolve("position", "rope-gptj") == (
        "rope",
        {"style": "gptj", "theta": 10000.0, "fraction": 1.0},
    )
    assert registry.resolve("position", {"name": "rope-neox", "theta": 1e6})[1]["style"] == "neox"
    with pytest.raises(registry.RegistryError, match="fixed to 'gptj'"):
        registry.resolve("position", {"name": "rope-gptj", "style": "neox"})


def test_rotary_dimension_must_be_even():
    with pytest.raises(registry.RegistryError, match="must be even"):
        registry.check_dims(
            "position", {"name": "rope", "fraction": 0.5}, dim=24, head_dim=6, max_seq_len=8
        )


# --- 3. absolute positions ---------------------------------------------------------------------


@pytest.mark.parametrize("dim", [8, 7])
def test_sinusoidal_matches_formula(dim):
    spec = {"name": "sinusoidal", "amplitude": 1.0}
    module = registry.build("position", spec, dim=dim, head_dim=dim, max_seq_len=32)
    positions = torch.arange(4, 12)
    out = module.embed(torch.zeros(1, len(positions), dim), positions)[0]
    for row, pos in enumerate(positions.tolist()):
        for i in range(dim):
            angle = pos / 10000 ** (2 * (i // 2) / dim)
            expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert out[row, i].item() == pytest.approx(expected, abs=1e-5)
    q, k = torch.randn(1, 1, 3, dim), torch.randn(1, 1, 3, dim)
    assert module.rotate(q, k, torch.arange(3)) == (q, k)


def test_sinusoidal_amplitude_defaults_to_the_embedding_init_std():
    unit = registry.build(
        "position", {"name": "sinusoidal", "amplitude": 1.0}, dim=16, head_dim=16, max_seq_len=32
    )
    default = registry.build("position", "sinusoidal", dim=16, head_dim=16, max_seq_len=32)
    x, positions = torch.randn(2, 5, 16), torch.arange(5)
    signal = unit.embed(torch.zeros(2, 5, 16), positions)
    torch.testing.assert_close(default.embed(x, positions), x + 0.02 * signal)


def test_learned_positions_and_none():
    learned = registry.build("position", "learned", dim=8, head_dim=4, max_seq_len=16)
    assert registry.count_params("position", "learned", dim=8, head_dim=4, max_seq_len=16) == 128
    x = torch.randn(2, 3, 8)
    positions = torch.tensor([5, 6, 7])
    torch.testing.assert_close(learned.embed(x, positions), x + learned.table.weight[5:8])
    none = registry.build("position", "none", dim=8, head_dim=4, max_seq_len=16)
    assert torch.equal(none.embed(x, positions), x)
    assert sum(p.numel() for p in none.parameters()) == 0


# --- 4. attention ------------------------------------------------------------------------------


def attention(name, dim=32, n_heads=4, n_kv_heads=2, bias=False, qk_norm="none"):
    return registry.build(
        "attention",
        {"name": name, "bias": bias, "qk_norm": qk_norm},
        dim=dim,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=dim // n_heads,
        dropout=0.0,
    )


def per_head_norm(kind, x, norm, eps=1e-5):
    """The qk-norm formula over head_dim: RMSNorm x / sqrt(mean x² + eps) · w, LayerNorm
    (x - mean) / sqrt(var + eps) · w + b (biased variance)."""
    if kind == "none":
        return x
    if kind == "rmsnorm":
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm.weight
    centred = x - x.mean(-1, keepdim=True)
    return (
        centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * norm.weight + norm.bias
    )


def reference_attention(module, x, rotate, qk_norm="none"):
    """Written out: repeated K/V heads, scores, masked_fill(-inf) above the diagonal, softmax."""
    batch, length, _ = x.shape
    heads, kv_heads, head_dim = module.n_heads, module.n_kv_heads, module.head_dim
    q = module.q_proj(x).view(batch, length, heads, head_dim).transpose(1, 2)
    k = module.k_proj(x).view(batch, length, kv_heads, head_dim).transpose(1, 2)
    v = module.v_proj(x).view(batch, length, kv_heads, head_dim).transpose(1, 2)
    q = per_head_norm(qk_norm, q, module.q_norm)
    k = per_head_norm(qk_norm, k, module.k_norm)
    q, k = rotate(q, k)
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
    future = torch.ones(length, length, dtype=torch.bool).triu(diagonal=1)
    weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
    y = (weights @ v).transpose(1, 2).reshape(batch, length, heads * head_dim)
    return module.o_proj(y)


@pytest.mark.parametrize("name", ["mha", "mqa", "gqa"])
@pytest.mark.parametrize("with_rope", [False, True])
def test_sdpa_path_equals_explicit_attention(name, with_rope):
    torch.manual_seed(0)
    module = attention(name, bias=True)
    x = torch.randn(2, 7, 32)
    rotate = rope("neox", 8).rotation(torch.arange(7)) if with_rope else identity_rotate
    expected = reference_attention(module, x, rotate)
    torch.testing.assert_close(module(x, rotate), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("qk_norm", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("name", ["mha", "gqa"])
def test_qk_norm_matches_the_formula_before_rotation(name, qk_norm):
    torch.manual_seed(0)
    module = attention(name, qk_norm=qk_norm)
    with torch.no_grad():  # gains and biases away from their init, so a misplaced norm shows
        for param in [*module.q_norm.parameters(), *module.k_norm.parameters()]:
            param.normal_()
    x = torch.randn(2, 7, 32) * 3
    rotate = rope("neox", 8).rotation(torch.arange(7))
    expected = reference_attention(module, x, rotate, qk_norm)
    torch.testing.assert_close(module(x, rotate), expected, rtol=0, atol=1e-5)
    assert not torch.allclose(expected, reference_attention(module, x, rotate), atol=1e-3)


@pytest.mark.parametrize("qk_norm", ["none", "rmsnorm"])
@pytest.mark.parametrize("name", ["mha", "mqa", "gqa"])
def test_cached_attention_uses_bottom_right_mask(name, qk_norm):
    """Prefill 5 tokens, then 3 at once and 1 more: equal to the full causal pass."""
    torch.manual_seed(0)
    module = attention(name, qk_norm=qk_norm)
    rotation = rope("gptj", 8).rotation
    x = torch.randn(2, 9, 32)
    full = module(x, rotation(torch.arange(9)))
    cache = KVCacheLayer()
    parts = [module(x[:, :5], rotation(torch.arange(5)), cache)]
    parts.append(module(x[:, 5:8], rotation(torch.arange(5, 8)), cache))
    parts.append(module(x[:, 8:], rotation(torch.arange(8, 9)), cache))
    assert len(cache) == 9 and cache.k.size(1) == module.n_kv_heads  # stored before repetition
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-5)


def test_causal_mask_alignment():
    expected = torch.tensor(
        [[True, True, True, False, False], [True, True, True, True, False], [True] * 5]
    )
    assert torch.equal(causal_mask(3, 5), expected)
    assert torch.equal(causal_mask(4, 4), torch.ones(4, 4, dtype=torch.bool).tril())


def test_gqa_with_all_heads_equals_mha():
    torch.manual_seed(0)
    mha = attention("mha")
    gqa = attention("gqa", n_kv_heads=4)
    gqa.load_state_dict(mha.state_dict())
    x, rotate = torch.randn(2, 6, 32), rope("neox", 8).rotation(torch.arange(6))
    torch.testing.assert_close(gqa(x, rotate), mha(x, rotate), rtol=0, atol=0)


@pytest.mark.parametrize(
    "name, n_kv_heads, bias, expected",
    [
        # q and o: 32·32 each; k and v: 32·(kv·8) each; biases 32 + 2·kv·8 + 32
        ("mha", 2, False, 2 * 32 * 32 + 2 * 32 * 32),
        ("mqa", 2, False, 2 * 32 * 32 + 2 * 32 * 8),
        ("gqa", 2, False, 2 * 32 * 32 + 2 * 32 * 16),
        ("gqa", 2, True, 2 * 32 * 32 + 2 * 32 * 16 + 32 + 2 * 16 + 32),
        ("mqa", None, True, 2 * 32 * 32 + 2 * 32 * 8 + 32 + 2 * 8 + 32),
    ],
)
@pytest.mark.parametrize("qk_norm, norm_params", [("none", 0), ("rmsnorm", 16), ("layernorm", 32)])
def test_attention_heads_and_param_counts(name, n_kv_heads, bias, expected, qk_norm, norm_params):
    expected += norm_params  # q_norm and k_norm: a gain (and a bias) of head_dim 8 each
    module = attention(name, n_kv_heads=n_kv_heads, bias=bias, qk_norm=qk_norm)
    assert module.k_proj.out_features == module.n_kv_heads * 8
    assert module.n_kv_heads == {"mha": 4, "mqa": 1, "gqa": n_kv_heads}[name]
    assert sum(p.numel() for p in module.parameters()) == expected
    dims = dict(dim=32, n_heads=4, n_kv_heads=n_kv_heads, head_dim=8, dropout=0.0)
    spec = {"name": name, "bias": bias, "qk_norm": qk_norm}
    assert registry.count_params("attention", spec, **dims) == expected


# --- dense mlps --------------------------------------------------------------------------------


def test_dense_mlps_match_their_formulas():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16)
    relu = registry.build("mlp", "relu", dim=16, dropout=0.0)
    assert relu.up_proj.out_features == 64
    torch.testing.assert_close(relu(x), relu.down_proj(torch.relu(relu.up_proj(x))))
    relu2 = registry.build("mlp", "relu2", dim=16, dropout=0.0)
    assert relu2.up_proj.out_features == 64
    torch.testing.assert_close(relu2(x), relu2.down_proj(torch.relu(relu2.up_proj(x)) ** 2))
    gelu = registry.build("mlp", {"name": "gelu", "approximate": "tanh"}, dim=16, dropout=0.0)
    up = gelu.up_proj(x)
    tanh_gelu = 0.5 * up * (1 + torch.tanh(math.sqrt(2 / math.pi) * (up + 0.044715 * up**3)))
    torch.testing.assert_close(gelu(x), gelu.down_proj(tanh_gelu), rtol=0, atol=1e-5)
    swiglu = registry.build("mlp", "swiglu", dim=16, dropout=0.0)
    gated = F.silu(swiglu.gate_proj(x)) * swiglu.up_proj(x)
    torch.testing.assert_close(swiglu(x), swiglu.down_proj(gated))
    for module in (relu, relu2, gelu, swiglu):
        assert module.aux_loss.item() == 0 and module.aux_loss.dim() == 0
        assert module.expert_load is None


def test_swiglu_hidden_default():
    assert swiglu_hidden(512) == 1408  # ceil(1365.33) = 1366 -> 1408
    assert swiglu_hidden(768) == 2048
    assert swiglu_hidden(96) == 256
    module = registry.build("mlp", "swiglu", dim=512, dropout=0.0)
    assert module.up_proj.out_features == 1408
    # about the parameters of a 4·dim two-matrix MLP
    swiglu = registry.count_params("mlp", "swiglu", dim=512, dropout=0.0)
    relu = registry.count_params("mlp", "relu", dim=512, dropout=0.0)
    assert swiglu / relu == pytest.approx(1.03, abs=0.01)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("relu", 2 * 16 * 64),
        ("relu2", 2 * 16 * 64),
        ({"name": "relu2", "hidden": 10, "bias": True}, 2 * 16 * 10 + 10 + 16),
        ({"name": "gelu", "hidden": 10, "bias": True}, 2 * 16 * 10 + 10 + 16),
        ("swiglu", 3 * 16 * 64),
        ({"name": "swiglu", "hidden": 24, "bias": True}, 3 * 16 * 24 + 2 * 24 + 16),
    ],
)
def test_dense_mlp_param_counts(spec, expected):
    module = registry.build("mlp", spec, dim=16, dropout=0.0)
    assert sum(p.numel() for p in module.parameters()) == expected
    assert registry.count_params("mlp", spec, dim=16, dropout=0.0) == expected


def test_qk_norm_under_bf16_autocast_runs_the_fused_norm_without_a_dtype_warning(recwarn):
    from minimind.model.config import ModelConfig
    from minimind.model.lm import MiniMindLM

    attention = {"name": "mha", "qk_norm": "rmsnorm"}
    model = MiniMindLM(
        ModelConfig(vocab_size=64, dim=32, n_layers=1, n_heads=4, attention=attention)
    )
    ids = torch.randint(0, 64, (2, 8))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(ids, labels=ids).loss
    loss.backward()
    assert not [w for w in recwarn if "Mismatch dtype" in str(w.message)]


@pytest.mark.parametrize(("block", "norm_first"), [("prenorm", True), ("postnorm", False)])
def test_blocks_match_torch_transformer_layers(block: str, norm_first: bool) -> None:
    """A pre-norm and a post-norm block (MHA and a ReLU MLP with biases, LayerNorm, no rotation)
    equal torch's own `TransformerEncoderLayer` with `norm_first` on and off, given the same
    weights and a causal mask: the residual wiring against an independent implementation."""
    dim, n_heads, hidden = 32, 4, 64
    torch.manual_seed(0)
    ours = registry.build(
        "block",
        block,
        attention=registry.build(
            "attention",
            {"name": "mha", "bias": True},
            dim=dim,
            n_heads=n_heads,
            n_kv_heads=n_heads,
            head_dim=dim // n_heads,
            dropout=0.0,
        ),  # fmt: skip
        mlp=registry.build(
            "mlp", {"name": "relu", "hidden": hidden, "bias": True}, dim=dim, dropout=0.0
        ),
        norm=lambda: registry.build("norm", "layernorm", dim=dim),
    ).eval()
    reference = torch.nn.TransformerEncoderLayer(
        dim,
        n_heads,
        hidden,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=norm_first,
    ).eval()
    attn = ours.attn
    with torch.no_grad():
        reference.self_attn.in_proj_weight.copy_(
            torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        )
        reference.self_attn.in_proj_bias.copy_(
            torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
        )
        reference.self_attn.out_proj.weight.copy_(attn.o_proj.weight)
        reference.self_attn.out_proj.bias.copy_(attn.o_proj.bias)
        reference.linear1.weight.copy_(ours.mlp.up_proj.weight)
        reference.linear1.bias.copy_(ours.mlp.up_proj.bias)
        reference.linear2.weight.copy_(ours.mlp.down_proj.weight)
        reference.linear2.bias.copy_(ours.mlp.down_proj.bias)
        for mine, theirs in ((ours.attn_norm, reference.norm1), (ours.mlp_norm, reference.norm2)):
            mine.weight.normal_(1.0, 0.1)
            mine.bias.normal_(0.0, 0.1)
            theirs.load_state_dict(mine.state_dict())
    x = torch.randn(2, 7, dim)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(7)
    expected = reference(x, src_mask=mask, is_causal=True)
    got = ours(x, rotate=lambda q, k: (q, k))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
