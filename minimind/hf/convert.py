"""MiniMind models as Hugging Face transformers models: the one home of the name mapping.

`to_hf(model)` picks the architecture that computes exactly what `model` computes and copies the
weights into it:
- `LlamaForCausalLM`: rmsnorm, rope (neox layout over the whole head), mha/mqa/gqa without
  QK-norm, swiglu, prenorm, no logit soft-capping; tied or untied head, biases as configured;
- `MixtralForCausalLM`: the same with a `moe` mlp of swiglu experts, no shared experts,
  top_k >= 2 (Mixtral always renormalises the chosen weights), aux-loss balancing (the bias of
  loss-free balancing would change the choice) and no attention biases;
- `MiniMindForCausalLM` (`modeling_minimind.py`, shipped beside the weights) for every other
  combination of the built-in components.
A component that none of them implements is a `ValueError` naming it: an export never computes
something else than the harness did. The vocabulary keeps its padded rows, so log-likelihoods
are the harness's softmax over all of them; generation suppresses the padded ids
(`generation_config.suppress_tokens`), as the harness never samples them.

The benchmark's peers (`minimind bench --suite model|moe`) are built here too: `to_hf_llama` and
`to_hf_mixtral_moe` (transformers 5 stores Mixtral's experts fused as 3-D parameters:
`gate_up_proj` [E, 2·hidden, dim], gate rows first, and `down_proj` [E, dim, hidden]).
"""

from __future__ import annotations

import re
from typing import Any, Literal

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

import registry
from minimind.hf.configuration_minimind import MiniMindConfig
from minimind.hf.modeling_minimind import MiniMindForCausalLM
from minimind.model.config import ModelConfig
from minimind.model.lm import MiniMindLM
from registry.moe import MoE

Architecture = Literal["llama", "mixtral", "minimind"]

# MiniMindLM parameter names -> LlamaForCausalLM's (and MixtralForCausalLM's), applied in order.
_LLAMA_NAMES: tuple[tuple[str, str], ...] = (
    (r"^layers\.(\d+)\.attn_norm\.", r"model.layers.\1.input_layernorm."),
    (r"^layers\.(\d+)\.mlp_norm\.", r"model.layers.\1.post_attention_layernorm."),
    (r"^layers\.(\d+)\.attn\.", r"model.layers.\1.self_attn."),
    (r"^layers\.(\d+)\.mlp\.router\.", r"model.layers.\1.mlp.gate."),
    (r"^layers\.(\d+)\.mlp\.", r"model.layers.\1.mlp."),
    (r"^(embed_tokens|norm)\.", r"model.\1."),
)
_MOE_EXPERT = re.compile(r"^layers\.(\d+)\.mlp\.(experts\.\d+|expert_bias)")

# The components and options `modeling_minimind.py` implements (options the forward pass ignores,
# such as the MoE's balance-loss settings, need no support).
_REMOTE_COMPONENTS: dict[str, dict[str, set[str]]] = {
    "norm": {"rmsnorm": {"eps"}, "layernorm": {"eps", "bias"}},
    "position": {
        "none": set(),
        "learned": set(),
        "sinusoidal": {"base", "amplitude"},
        "rope": {"style", "theta", "fraction"},
    },
    "attention": {name: {"bias", "qk_norm"} for name in ("mha", "mqa", "gqa")},
    "mlp": {
        "relu": {"hidden", "bias"},
        "relu2": {"hidden", "bias"},
        "gelu": {"hidden", "bias", "approximate"},
        "swiglu": {"hidden", "bias"},
        "moe": {
            "n_experts",
            "top_k",
            "n_shared",
            "expert",
            "hidden",
            "aux_loss_coef",
            "aux_scope",
            "balance",
            "bias_update_rate",
            "dispatch",
        },
    },
    "block": {"prenorm": set(), "postnorm": set()},
}
_REMOTE_QK_NORMS = {"none", "rmsnorm", "layernorm"}


def architecture(cfg: ModelConfig) -> Architecture:
    """The HF architecture that computes exactly what `MiniMindLM(cfg)` computes; ValueError
    naming the component when none does."""
    check_exportable(cfg)
    (norm, _), (position, rope), (_, attention), (mlp, mlp_options), (block, _) = (
        cfg.component(slot) for slot in ("norm", "position", "attention", "mlp", "block")
    )
    llama_body = (
        norm == "rmsnorm"
        and position == "rope"
        and rope["style"] == "neox"
        and rope["fraction"] == 1.0
        and attention["qk_norm"] == "none"
        and block == "prenorm"
        and cfg.logit_softcap is None
    )
    if llama_body and mlp == "swiglu":
        return "llama"
    if (
        llama_body
        and mlp == "moe"
        and mlp_options["expert"] == "swiglu"
        and mlp_options["n_shared"] == 0
        and mlp_options["top_k"] >= 2
        and mlp_options["balance"] == "aux_loss"
        and not attention["bias"]
    ):
        return "mixtral"
    return "minimind"


def check_exportable(cfg: ModelConfig) -> None:
    """ValueError `model.<slot>: ...` for a component `modeling_minimind.py` does not implement."""
    if cfg.parametrization.name != "standard":
        raise ValueError(
            "model.parametrization: a mup model has no Hugging Face export (its logit multiplier "
            "and attention scale have no counterpart in the exported code)"
        )
    for slot, known in _REMOTE_COMPONENTS.items():
        name, options = cfg.component(slot)
        if name not in known:
            raise ValueError(
                f"model.{slot}: component {name!r} has no Hugging Face export "
                f"(exported code implements {', '.join(sorted(known))})"
            )
        unknown = set(options) - known[name]
        if unknown:
            raise ValueError(
                f"model.{slot}: option(s) {', '.join(sorted(unknown))} of {name!r} have no "
                "Hugging Face export"
            )
        if slot == "attention" and options["qk_norm"] not in _REMOTE_QK_NORMS:
            raise ValueError(f"model.attention: qk_norm {options['qk_norm']!r} has no export")
        if slot == "mlp" and name == "moe":
            expert = registry.resolve("mlp", options["expert"])[0]
            if expert not in known or expert == "moe":
                raise ValueError(f"model.mlp: expert {expert!r} has no Hugging Face export")


def _mlp_spec(name: str, options: dict[str, Any], module: Any) -> dict[str, Any]:
    """The dense mlp's spec for `MiniMindConfig`, its width read off the built module."""
    spec = {"name": name, "hidden": module.up_proj.out_features, "bias": bool(options["bias"])}
    if name == "gelu":
        spec["approximate"] = options["approximate"]
    return spec


def minimind_config(model: MiniMindLM) -> MiniMindConfig:
    """The `MiniMindConfig` of `model` for `modeling_minimind.py`: resolved names and widths."""
    cfg = model.config
    layer = _first_layer(model)
    mlp_name, mlp_options = cfg.component("mlp")
    if mlp_name == "moe":
        # the expert's options as resolved: an alias may fix some (gelu with approximate tanh)
        expert_name, expert_options = registry.resolve("mlp", mlp_options["expert"])
        mlp = {
            "name": "moe",
            **{k: mlp_options[k] for k in ("n_experts", "top_k", "n_shared", "balance")},
            "expert": _mlp_spec(expert_name, expert_options, layer.mlp.experts[0]),
        }
    else:
        mlp = _mlp_spec(mlp_name, mlp_options, layer.mlp)
    attention_name, attention = cfg.component("attention")
    return MiniMindConfig(
        vocab_size=cfg.padded_vocab_size,
        real_vocab_size=cfg.vocab_size,
        hidden_size=cfg.dim,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        head_dim=cfg.resolved_head_dim,
        max_position_embeddings=cfg.max_seq_len,
        norm=_named(*cfg.component("norm")),
        position=_named(*cfg.component("position")),
        attention={"name": attention_name, "n_kv_heads": layer.attn.n_kv_heads, **attention},
        mlp=mlp,
        block=cfg.component("block")[0],
        logit_softcap=cfg.logit_softcap,
        tie_word_embeddings=cfg.tie_embeddings,
    )


def _first_layer(model: MiniMindLM) -> Any:
    """The first block, as Any: its parts are whichever registry modules the config chose."""
    return model.layers[0]


def _named(name: str, options: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, **options}


def _llama_fields(model: MiniMindLM) -> dict[str, Any]:
    """The LlamaConfig/MixtralConfig fields both architectures share."""
    cfg = model.config
    rope = cfg.component("position")[1]
    return {
        "vocab_size": cfg.padded_vocab_size,  # the padded tables, so the weights copy 1:1
        "hidden_size": cfg.dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": _first_layer(model).attn.n_kv_heads,
        "head_dim": cfg.resolved_head_dim,
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.component("norm")[1]["eps"],
        "rope_parameters": {"rope_type": "default", "rope_theta": rope["theta"]},
        "tie_word_embeddings": cfg.tie_embeddings,
    }


def llama_config(model: MiniMindLM) -> LlamaConfig:
    """The `LlamaConfig` of a llama-shaped MiniMindLM; ValueError when it is not one."""
    if architecture(model.config) != "llama":
        raise ValueError(f"no LlamaForCausalLM twin: {_components(model.config)}")
    attention, mlp = model.config.component("attention")[1], model.config.component("mlp")[1]
    return LlamaConfig(
        **_llama_fields(model),
        intermediate_size=_first_layer(model).mlp.gate_proj.out_features,
        attention_bias=attention["bias"],
        mlp_bias=mlp["bias"],
    )


def mixtral_config(model: MiniMindLM) -> MixtralConfig:
    """The `MixtralConfig` of a Mixtral-shaped MiniMindLM; ValueError when it is not one."""
    if architecture(model.config) != "mixtral":
        raise ValueError(f"no MixtralForCausalLM twin: {_components(model.config)}")
    moe = model.config.component("mlp")[1]
    return MixtralConfig(
        **_llama_fields(model),
        intermediate_size=_first_layer(model).mlp.experts[0].gate_proj.out_features,
        num_local_experts=moe["n_experts"],
        num_experts_per_tok=moe["top_k"],
        router_jitter_noise=0.0,
        sliding_window=None,
        output_router_logits=False,
    )


def _components(cfg: ModelConfig) -> str:
    return ", ".join(f"{slot}={getattr(cfg, slot)}" for slot in _REMOTE_COMPONENTS)


def hf_config(model: MiniMindLM) -> PretrainedConfig:
    """The HF config of the architecture `architecture(model.config)` names."""
    arch = architecture(model.config)
    if arch == "llama":
        return llama_config(model)
    if arch == "mixtral":
        return mixtral_config(model)
    return minimind_config(model)


def hf_state_dict(model: MiniMindLM, arch: Architecture) -> dict[str, torch.Tensor]:
    """`model`'s state dict under the names (and, for Mixtral's fused experts, the shapes) of
    the HF architecture `arch`."""
    state = model.state_dict()
    if arch == "minimind":  # modeling_minimind.py keeps the harness's names under `model.`
        return {(n if n == "lm_head.weight" else f"model.{n}"): t for n, t in state.items()}
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if _MOE_EXPERT.match(name):
            continue  # fused below; expert_bias is unused under aux-loss balancing
        hf_name = name
        for pattern, replacement in _LLAMA_NAMES:
            hf_name = re.sub(pattern, replacement, hf_name)
        tensors[hf_name] = tensor
    if arch == "mixtral":
        for i in range(len(model.layers)):
            gate_up, down = _fused_experts(model.get_submodule(f"layers.{i}.mlp"))
            tensors[f"model.layers.{i}.mlp.experts.gate_up_proj"] = gate_up
            tensors[f"model.layers.{i}.mlp.experts.down_proj"] = down
    return tensors


def _fused_experts(moe: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixtral's fused experts: gate_up [E, 2·hidden, dim] (gate rows first), down [E, dim, hidden]."""
    gate_up = torch.stack([torch.cat((e.gate_proj.weight, e.up_proj.weight)) for e in moe.experts])
    return gate_up, torch.stack([e.down_proj.weight for e in moe.experts])


def to_hf(model: MiniMindLM, attn_implementation: str = "sdpa") -> PreTrainedModel:
    """The HF model computing the same logits as `model` (a copy of its weights, on its device);
    ValueError naming a component no HF model computes exactly."""
    arch = architecture(model.config)
    config = hf_config(model)
    model_class: type[PreTrainedModel] = {
        "llama": LlamaForCausalLM,
        "mixtral": MixtralForCausalLM,
        "minimind": MiniMindForCausalLM,
    }[arch]
    hf = model_class._from_config(config, attn_implementation=attn_implementation)
    tensors = hf_state_dict(model, arch)
    # strict: a parameter on either side without its counterpart would be a different model
    missing, unexpected = hf.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{model_class.__name__}: parameters without a counterpart: "
            f"missing {sorted(missing)}, unexpected {sorted(unexpected)}"
        )
    return hf.to(next(model.parameters()).device).eval()


def to_hf_llama(model: MiniMindLM, attn_implementation: str = "sdpa") -> LlamaForCausalLM:
    """A `LlamaForCausalLM` that trains as `model` does (the benchmark's peer); ValueError when
    none does. Llama has no residual dropout, so a model with dropout has no training twin."""
    if model.config.dropout:
        raise ValueError(f"no LlamaForCausalLM twin: dropout={model.config.dropout}")
    llama_config(model)  # names why not, before anything is built
    hf = to_hf(model, attn_implementation)
    assert isinstance(hf, LlamaForCausalLM)
    return hf


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
    first: Any = moe.experts[0]
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
        gate_up, down = _fused_experts(moe)
        block.experts.gate_up_proj.copy_(gate_up)
        block.experts.down_proj.copy_(down)
    return block.to(moe.router.weight.device)
