"""attention slot: causal self-attention `mha`, `mqa` and `gqa`, differing only in key/value heads.

- `mha`: n_kv_heads = n_heads;  `mqa`: n_kv_heads = 1;  `gqa`: the config's `n_kv_heads`.
Projections are named `q_proj`, `k_proj`, `v_proj`, `o_proj` as in Llama, so weights map onto HF
transformers. Training runs `F.scaled_dot_product_attention(is_causal=True)` with `enable_gqa`, so
K/V are never repeated in memory. Decoding with a cache attends with the mask that the cache gives
(`registry.kv_cache`).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from registry.core import register
from registry.kv_cache import CacheLayer
from registry.position import Rotate


class CausalSelfAttention(nn.Module):
    """Causal self-attention: x [B, T, dim] -> [B, T, dim]; subclasses choose `kv_heads`."""

    @dataclass(frozen=True)
    class Options:
        bias: bool = False

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
        return weights + (biases if options.bias else 0)

    def forward(
        self,
        x: torch.Tensor,
        rotate: Rotate,
        cache: CacheLayer | None = None,
    ) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim]; `rotate` holds the tokens' absolute positions; adds
        k, v to `cache`."""
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, k)
        mask = None  # without a cache: SDPA's is_causal
        if cache is not None:
            k, v, mask = cache.update(k, v)
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
