"""attention slot: causal self-attention `mha`, `mqa` and `gqa`, differing only in key/value heads.

- `mha`: n_kv_heads = n_heads;  `mqa`: n_kv_heads = 1;  `gqa`: the config's `n_kv_heads`.
Projections are named `q_proj`, `k_proj`, `v_proj`, `o_proj` as in Llama, so weights map onto HF
transformers. Training runs `F.scaled_dot_product_attention(is_causal=True)` with `enable_gqa`, so
K/V are never repeated in memory. Decoding with a cache (fewer queries than keys) uses an explicit
boolean mask aligned to the bottom right, because `is_causal=True` aligns top-left there.

`qk_norm` (`none|rmsnorm|layernorm`, OLMo-core, modded-nanogpt): q and k are normalised per head,
over head_dim, before the rotation, by a registry norm of width head_dim shared by the heads
(`q_norm`, `k_norm`). It bounds the attention logits, which keeps high learning rates stable.
Keys enter the cache already normalised, so decoding needs nothing more.
"""

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from registry.core import build, count_params, register
from registry.position import Rotate


class KVCacheLayer:
    """Keys and values [B, Hkv, S, hd] of one layer for the S tokens seen so far.

    They are stored before any GQA repetition, and new entries are concatenated after the old ones.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.size(2)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add k, v [B, Hkv, T, hd]; return all keys and values [B, Hkv, S + T, hd]."""
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat((self.k, k), dim=2), torch.cat((self.v, v), dim=2)
        return self.k, self.v


def causal_mask(n_queries: int, n_keys: int, device: torch.device | None = None) -> torch.Tensor:
    """Boolean mask [n_queries, n_keys], True where attention is allowed.

    Aligned bottom-right: query i is the token at absolute position n_keys - n_queries + i and sees
    keys 0..that position.
    """
    ones = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
    return ones.tril(diagonal=n_keys - n_queries)


class CausalSelfAttention(nn.Module):
    """Causal self-attention: x [B, T, dim] -> [B, T, dim]; subclasses choose `kv_heads`."""

    @dataclass(frozen=True)
    class Options:
        bias: bool = False
        qk_norm: Literal["none", "rmsnorm", "layernorm"] = "none"

    @staticmethod
    def kv_heads(n_heads: int, n_kv_heads: int | None) -> int:
        raise NotImplementedError

    def __init__(
        self,
        options: Options,
        *,
        dim: int,
        n_heads: int,
        n_kv_heads: int | None,
        head_dim: int,
        dropout: float,
    ) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.dropout = n_heads, head_dim, dropout
        self.n_kv_heads = self.kv_heads(n_heads, n_kv_heads)
        self.q_proj = nn.Linear(dim, n_heads * head_dim, bias=options.bias)
        self.k_proj = nn.Linear(dim, self.n_kv_heads * head_dim, bias=options.bias)
        self.v_proj = nn.Linear(dim, self.n_kv_heads * head_dim, bias=options.bias)
        self.o_proj = nn.Linear(n_heads * head_dim, dim, bias=options.bias)
        qk_norm = options.qk_norm != "none"
        self.q_norm = build("norm", options.qk_norm, dim=head_dim) if qk_norm else nn.Identity()
        self.k_norm = build("norm", options.qk_norm, dim=head_dim) if qk_norm else nn.Identity()
        self.resid_dropout = nn.Dropout(dropout)

    @classmethod
    def check_dims(
        cls, options: Options, *, n_heads: int, n_kv_heads: int | None, **sizes: object
    ) -> None:
        cls.kv_heads(n_heads, n_kv_heads)

    @classmethod
    def param_count(
        cls,
        options: Options,
        *,
        dim: int,
        n_heads: int,
        n_kv_heads: int | None,
        head_dim: int,
        dropout: float,
    ) -> int:
        q_width, kv_width = n_heads * head_dim, cls.kv_heads(n_heads, n_kv_heads) * head_dim
        weights = 2 * dim * q_width + 2 * dim * kv_width
        biases = q_width + 2 * kv_width + dim
        norms = 0
        if options.qk_norm != "none":
            norms = 2 * count_params("norm", options.qk_norm, dim=head_dim)
        return weights + (biases if options.bias else 0) + norms

    def forward(
        self,
        x: torch.Tensor,
        rotate: Rotate,
        cache: KVCacheLayer | None = None,
    ) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim]; `rotate` holds the tokens' absolute positions; appends
        k, v to `cache`."""
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(self.q_norm(q), self.k_norm(k))
        if cache is not None:
            k, v = cache.append(k, v)
        n_keys = k.size(2)
        # A single new query may see every key: no mask. Other queries after cached keys need the
        # bottom-right-aligned mask, which SDPA's is_causal (top-left) is not.
        mask = None if length in (1, n_keys) else causal_mask(length, n_keys, x.device)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=mask is None and length > 1,
            enable_gqa=self.n_kv_heads != self.n_heads,
        )
        y = y.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim)
        return self.resid_dropout(self.o_proj(y))


@register("attention", "mha")
class MultiHeadAttention(CausalSelfAttention):
    """Every query head has its own key/value head (n_kv_heads = n_heads; the config's is unused)."""

    @staticmethod
    def kv_heads(n_heads: int, n_kv_heads: int | None) -> int:
        return n_heads


@register("attention", "mqa")
class MultiQueryAttention(CausalSelfAttention):
    """All query heads share one key/value head (n_kv_heads = 1; the config's is unused)."""

    @staticmethod
    def kv_heads(n_heads: int, n_kv_heads: int | None) -> int:
        return 1


@register("attention", "gqa")
class GroupedQueryAttention(CausalSelfAttention):
    """Groups of n_heads / n_kv_heads query heads share a key/value head (the config's n_kv_heads)."""

    @staticmethod
    def kv_heads(n_heads: int, n_kv_heads: int | None) -> int:
        if n_kv_heads is None:
            raise ValueError("gqa needs n_kv_heads (the number of key/value heads)")
        return n_kv_heads
