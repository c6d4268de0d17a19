"""HF transformers twins of MiniMind modules, with the same dimensions and a copy of the weights.

They are the peers the benchmark measures against (`minimind bench --suite model|moe`):
- `to_hf_llama(model)`: a `LlamaForCausalLM` for a llama-shaped `MiniMindLM` (rmsnorm, neox
  rope over the whole head, mha/mqa/gqa, swiglu, prenorm, no dropout);
- `to_hf_mixtral_moe(moe)`: a `MixtralSparseMoeBlock` for a `moe` mlp with swiglu experts, no
  shared experts, top_k > 1 (Mixtral always renormalises the chosen weights) and aux-loss routing.
  transformers 5 stores the experts fused as 3-D parameters: `gate_up_proj` [E, 2·hidden, dim]
  (gate rows first) and `down_proj` [E, dim, hidden].
Anything else raises ValueError instead of building a model that computes something different.
"""

from __future__ import annotations

import re

import torch
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

from minimind.model import MiniMindLM
from registry.attention import CausalSelfAttention
from registry.mlp import SwiGLUMLP
from registry.moe import MoE

# MiniMindLM parameter names -> LlamaForCausalLM parameter names, applied in order.
_LLAMA_NAMES: tuple[tuple[str, str], ...] = (
    (r"^layers\.(\d+)\.attn_norm\.", r"model.layers.\1.input_layernorm."),
    (r"^layers\.(\d+)\.mlp_norm\.", r"model.layers.\1.post_attention_layernorm."),
    (r"^layers\.(\d+)\.attn\.", r"model.layers.\1.self_attn."),
    (r"^layers\.(\d+)\.mlp\.", r"model.layers.\1.mlp."),
    (r"^(embed_tokens|norm)\.", r"model.\1."),
)


def llama_config(model: MiniMindLM) -> LlamaConfig:
    """The `LlamaConfig` of a llama-shaped MiniMindLM; ValueError names the first mismatch."""
    cfg = model.config
    slots = {
        slot: cfg.component(slot) for slot in ("norm", "position", "attention", "mlp", "block")
    }
    (_, norm), (position, rope), (_, attention), (mlp, swiglu) = (
        slots["norm"],
        slots["position"],
        slots["attention"],
        slots["mlp"],
    )
    required = {
        "norm": slots["norm"][0] == "rmsnorm",
        "position": position == "rope" and rope["style"] == "neox" and rope["fraction"] == 1.0,
        "attention": attention["qk_norm"] == "none",
        "mlp": mlp == "swiglu",
        "block": slots["block"][0] == "prenorm",
        "dropout": cfg.dropout == 0.0,
        "logit_softcap": cfg.logit_softcap is None,
    }
    for field, ok in required.items():
        if not ok:
            raise ValueError(f"no LlamaForCausalLM twin: {field}={getattr(cfg, field)!r}")
    layer = model.layers[0]
    mlp_module, attention_module = layer.mlp, layer.attn
    # The kinds checked above: built-in swiglu and causal self-attention.
    assert isinstance(mlp_module, SwiGLUMLP) and isinstance(attention_module, CausalSelfAttention)
    return LlamaConfig(
        vocab_size=cfg.padded_vocab_size,  # the padded tables, so the weights copy 1:1
        hidden_size=cfg.dim,
        intermediate_size=mlp_module.gate_proj.out_features,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=attention_module.n_kv_heads,
        head_dim=cfg.resolved_head_dim,
        max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=norm["eps"],
        rope_parameters={"rope_type": "default", "rope_theta": rope["theta"]},
        tie_word_embeddings=cfg.tie_embeddings,
        attention_bias=attention["bias"],
        mlp_bias=swiglu["bias"],
        use_cache=False,
    )


def to_hf_llama(model: MiniMindLM, attn_implementation: str = "sdpa") -> LlamaForCausalLM:
    """A `LlamaForCausalLM` computing the same logits as `model` (a copy of its weights)."""
    hf = LlamaForCausalLM._from_config(llama_config(model), attn_implementation=attn_implementation)
    hf_params = dict(hf.named_parameters(remove_duplicate=False))
    written = set()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            hf_name = name
            for pattern, replacement in _LLAMA_NAMES:
                hf_name = re.sub(pattern, replacement, hf_name)
            hf_params[hf_name].copy_(tensor)
            written.add(hf_name)
    if missing := set(hf_params) - written:
        raise ValueError(f"LlamaForCausalLM parameters left uncopied: {sorted(missing)}")
    return hf.to(next(model.parameters()).device)


def to_hf_mixtral_moe(moe: MoE, experts_implementation: str = "eager") -> MixtralSparseMoeBlock:
    """A `MixtralSparseMoeBlock` computing the same outputs as `moe`: x [B, T, dim] -> [B, T, dim].

    `experts_implementation`: "eager" (HF's loop over the experts hit) or "grouped_mm",
    "batched_mm" (transformers' fused kernels; they need torch's grouped_mm / bmm).
    """
    options = moe.options
    if (
        options.expert != "swiglu"
        or options.n_shared
        or options.top_k < 2
        or options.balance != "aux_loss"
    ):
        raise ValueError(
            "no MixtralSparseMoeBlock twin: needs swiglu experts, n_shared 0, top_k >= 2 and "
            f"balance aux_loss, got {options}"
        )
    experts: list[SwiGLUMLP] = []
    for expert in moe.experts:
        assert isinstance(expert, SwiGLUMLP)  # options.expert is swiglu
        experts.append(expert)
    first = experts[0]
    if first.gate_proj.bias is not None:
        raise ValueError("no MixtralSparseMoeBlock twin: Mixtral experts have no biases")
    config = MixtralConfig(
        hidden_size=moe.router.in_features,
        intermediate_size=first.gate_proj.out_features,
        num_local_experts=options.n_experts,
        num_experts_per_tok=options.top_k,
        router_jitter_noise=0.0,
        hidden_act="silu",
    )
    config._experts_implementation = experts_implementation
    block = MixtralSparseMoeBlock(config)
    with torch.no_grad():
        block.gate.weight.copy_(moe.router.weight)
        block.experts.gate_up_proj.copy_(
            torch.stack([torch.cat((e.gate_proj.weight, e.up_proj.weight)) for e in experts])
        )
        block.experts.down_proj.copy_(torch.stack([e.down_proj.weight for e in experts]))
    return block.to(moe.router.weight.device)
