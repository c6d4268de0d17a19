"""`MiniMindForCausalLM`: the model code shipped beside an export (`auto_map`, loaded with
`trust_remote_code=True`) for the component combinations that no transformers architecture
computes exactly (post-norm, LayerNorm, learned, sinusoidal or no positions, GPT-J or partial
rotary, QK-norm, ReLU/ReLU²/GELU, soft-capped logits, MoE with shared experts or bias balancing).

It imports torch and transformers only, so an export runs where the harness is not installed; it
therefore restates the forward pass of the harness's built-in components (`registry/`), for
inference: dropout, the MoE's auxiliary loss and its bias update are training-time only and absent.
`minimind export` refuses components this file does not implement, and the tests check its logits
against the harness's for every combination of the registry. Parameter names are the harness's,
under `model.` (the LM head stays `lm_head`).

Generation uses transformers' `DynamicCache`; batches must not be padded (positions count from
each row's first token, as in the harness), so a padding `attention_mask` is refused.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_minimind import MiniMindConfig


def build_norm(spec: dict[str, Any], dim: int) -> nn.Module:
    if spec["name"] == "rmsnorm":
        return RMSNorm(dim, spec["eps"])
    return LayerNorm(dim, spec["eps"], spec["bias"])


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.dim,), self.weight, self.eps)


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float, bias: bool) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)


class Position(nn.Module):
    """Absolute positions added to the embeddings (`learned`, `sinusoidal`) or rotary ones applied
    to q and k (`rope`); `none` does neither. positions [T] are absolute (after the cache)."""

    def __init__(self, spec: dict[str, Any], dim: int, head_dim: int, max_len: int) -> None:
        super().__init__()
        self.spec, self.dim = spec, dim
        if spec["name"] == "learned":
            self.table = nn.Embedding(max_len, dim)
        if spec["name"] == "rope":
            self.rotary_dim = int(head_dim * spec["fraction"])

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim]."""
        name = self.spec["name"]
        if name == "learned":
            return x + self.table(positions)
        if name == "sinusoidal":
            dim, base = self.dim, self.spec["base"]
            exponents = torch.arange(0, dim, 2, dtype=torch.float32, device=x.device) / dim
            angles = positions.to(torch.float32)[:, None] / base ** exponents[None, :]
            table = torch.empty(len(positions), dim, dtype=torch.float32, device=x.device)
            table[:, 0::2] = angles.sin()
            table[:, 1::2] = angles.cos()[:, : dim // 2]
            return x + (table * self.spec["amplitude"]).to(x.dtype)
        return x

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """cos and sin [T, rotary_dim] in float32, laid out for the style; None without rope."""
        if self.spec["name"] != "rope":
            return None
        exponents = torch.arange(0, self.rotary_dim, 2, device=positions.device).float()
        inv_freq = 1.0 / (self.spec["theta"] ** (exponents / self.rotary_dim))
        angles = positions.float()[:, None] * inv_freq[None, :]
        if self.spec["style"] == "neox":
            angles = torch.cat((angles, angles), dim=-1)
        else:
            angles = angles.repeat_interleave(2, dim=-1)
        return angles.cos(), angles.sin()

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [B, H, T, head_dim], its first rotary_dim channels rotated in float32."""
        rotated, passed = x[..., : self.rotary_dim].float(), x[..., self.rotary_dim :]
        if self.spec["style"] == "neox":
            first, second = rotated.chunk(2, dim=-1)
            partner = torch.cat((-second, first), dim=-1)
        else:
            even, odd = rotated[..., 0::2], rotated[..., 1::2]
            partner = torch.stack((-odd, even), dim=-1).flatten(-2)
        return torch.cat(((rotated * cos + partner * sin).to(x.dtype), passed), dim=-1)


class Attention(nn.Module):
    def __init__(self, config: MiniMindConfig, layer_idx: int) -> None:
        super().__init__()
        spec, dim = config.attention, config.hidden_size
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads = config.num_attention_heads, spec["n_kv_heads"]
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(dim, self.n_heads * self.head_dim, bias=spec["bias"])
        self.k_proj = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=spec["bias"])
        self.v_proj = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=spec["bias"])
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, dim, bias=spec["bias"])
        self.qk_norm = spec["qk_norm"] != "none"
        if self.qk_norm:  # the norm's default options, as the harness builds it
            qk = {"name": spec["qk_norm"], "eps": 1e-5, "bias": True}
            self.q_norm = build_norm(qk, self.head_dim)
            self.k_norm = build_norm(qk, self.head_dim)

    def forward(
        self,
        x: torch.Tensor,
        position: Position,
        cos_sin: tuple[torch.Tensor, torch.Tensor] | None,
        cache: Cache | None,
    ) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim], attending to the cached tokens and causally to x."""
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.qk_norm:
            q, k = self.q_norm(q.float()).to(q.dtype), self.k_norm(k.float()).to(k.dtype)
        if cos_sin is not None:
            q, k = position.rotate(q, *cos_sin), position.rotate(k, *cos_sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        past = k.size(2) - length
        mask = None
        if past and length > 1:  # bottom-right causal: query i sees keys up to past + i
            keys = torch.arange(k.size(2), device=x.device)
            queries = torch.arange(past, past + length, device=x.device)
            mask = keys[None, :] <= queries[:, None]
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=mask is None and past == 0 and length > 1,
            enable_gqa=self.n_kv_heads != self.n_heads,
        )
        return self.o_proj(y.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim))


class DenseMLP(nn.Module):
    """relu, relu2, gelu: down(act(up(x))); swiglu: down(silu(gate(x)) * up(x))."""

    def __init__(self, spec: dict[str, Any], dim: int) -> None:
        super().__init__()
        self.spec, hidden, bias = spec, spec["hidden"], spec["bias"]
        if spec["name"] == "swiglu":
            self.gate_proj = nn.Linear(dim, hidden, bias=bias)
        self.up_proj = nn.Linear(dim, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name, up = self.spec["name"], self.up_proj(x)
        if name == "swiglu":
            inner = F.silu(self.gate_proj(x)) * up
        elif name == "relu":
            inner = F.relu(up)
        elif name == "relu2":
            inner = F.relu(up).square()
        else:
            inner = F.gelu(up, approximate=self.spec["approximate"])
        return self.down_proj(inner)


class MoE(nn.Module):
    """Token-choice top-k routing over softmax probabilities (the choice shifted by
    `expert_bias` under bias balancing), weights renormalised when top_k > 1, plus shared experts."""

    def __init__(self, spec: dict[str, Any], dim: int) -> None:
        super().__init__()
        self.spec = spec
        self.router = nn.Linear(dim, spec["n_experts"], bias=False)
        self.experts = nn.ModuleList(
            DenseMLP(spec["expert"], dim) for _ in range(spec["n_experts"])
        )
        self.shared = nn.ModuleList(DenseMLP(spec["expert"], dim) for _ in range(spec["n_shared"]))
        self.register_buffer("expert_bias", torch.zeros(spec["n_experts"]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim]."""
        tokens = x.reshape(-1, x.size(-1))
        probs = self.router(tokens).float().softmax(dim=-1)
        scores = probs + self.expert_bias if self.spec["balance"] == "bias" else probs
        chosen = scores.topk(self.spec["top_k"], dim=-1).indices  # [N, k]
        weights = probs.gather(-1, chosen)
        if self.spec["top_k"] > 1:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token_ids, slot = (chosen == e).nonzero(as_tuple=True)
            if len(token_ids):
                routed = expert(tokens[token_ids]) * weights[token_ids, slot, None].to(x.dtype)
                out = out.index_add(0, token_ids, routed)
        for shared in self.shared:
            out = out + shared(tokens)
        return out.view_as(x)


class Block(nn.Module):
    def __init__(self, config: MiniMindConfig, layer_idx: int) -> None:
        super().__init__()
        dim = config.hidden_size
        self.prenorm = config.block == "prenorm"
        self.attn_norm, self.attn = build_norm(config.norm, dim), Attention(config, layer_idx)
        self.mlp_norm = build_norm(config.norm, dim)
        self.mlp = (
            MoE(config.mlp, dim) if config.mlp["name"] == "moe" else DenseMLP(config.mlp, dim)
        )

    def forward(
        self,
        x: torch.Tensor,
        position: Position,
        cos_sin: tuple[torch.Tensor, torch.Tensor] | None,
        cache: Cache | None,
    ) -> torch.Tensor:
        if self.prenorm:
            x = x + self.attn(self.attn_norm(x), position, cos_sin, cache)
            return x + self.mlp(self.mlp_norm(x))
        x = self.attn_norm(x + self.attn(x, position, cos_sin, cache))
        return self.mlp_norm(x + self.mlp(x))


class MiniMindPreTrainedModel(PreTrainedModel):
    config: MiniMindConfig  # transformers 5 reads the config class from this annotation
    config_class = MiniMindConfig
    base_model_prefix = "model"
    _no_split_modules = ["Block"]
    _supports_sdpa = True

    def _init_weights(self, module: nn.Module) -> None:
        """Exports always carry every weight; fresh models start as the harness's `normal`."""
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, 0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, 0.02)


class MiniMindModel(MiniMindPreTrainedModel):
    def __init__(self, config: MiniMindConfig) -> None:
        super().__init__(config)
        dim = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, dim)
        self.position = Position(
            config.position, dim, config.head_dim, config.max_position_embeddings
        )
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_hidden_layers))
        self.norm = build_norm(config.norm, dim) if config.block == "prenorm" else nn.Identity()
        self.post_init()

    def forward(self, input_ids: torch.Tensor, cache: Cache | None = None) -> torch.Tensor:
        """input_ids [B, T] (after the cached tokens) -> hidden states [B, T, dim]."""
        past = cache.get_seq_length() if cache is not None else 0
        length = input_ids.size(1)
        if past + length > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence of {past + length} tokens exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}"
            )
        positions = torch.arange(past, past + length, device=input_ids.device)
        x = self.position.embed(self.embed_tokens(input_ids), positions)
        cos_sin = self.position.cos_sin(positions)
        for layer in self.layers:
            x = layer(x, self.position, cos_sin, cache)
        return self.norm(x)


# transformers 5 names the cache `cache` in outputs and forward arguments, earlier releases
# `past_key_values`: accept either, return it under the name this transformers uses
_CACHE_FIELD = (
    "cache" if "cache" in {f.name for f in fields(CausalLMOutputWithPast)} else "past_key_values"
)


class MiniMindForCausalLM(MiniMindPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: MiniMindConfig) -> None:
        super().__init__(config)
        self.model = MiniMindModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """input_ids [B, T] -> logits [B, T, vocab_size] (soft-capped when the model caps them)."""
        cache = cache if cache is not None else kwargs.get("past_key_values")
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError(
                "MiniMind exports take unpadded batches: positions count from each row's first "
                "token, so a padded row would be a different sequence; run one sequence at a time"
            )
        if use_cache and cache is None:
            cache = DynamicCache()
        hidden = self.model(input_ids, cache)
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        logits = self.lm_head(hidden)
        if self.config.logit_softcap is not None:
            cap = self.config.logit_softcap
            logits = cap * torch.tanh(logits / cap)
        loss = None
        if labels is not None:  # next-token cross-entropy, -100 ignored (as the harness's loss)
            loss = F.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
            )
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: cache})  # type: ignore[arg-type]


__all__ = ["MiniMindForCausalLM", "MiniMindModel", "MiniMindPreTrainedModel"]
