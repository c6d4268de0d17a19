"""attention slot: causal self-attention `mha`, `mqa` and `gqa`, differing only in key/value heads.

- `mha`: n_kv_heads = n_heads;  `mqa`: n_kv_heads = 1;  `gqa`: the config's `n_kv_heads`.
Projections are named `q_proj`, `k_proj`, `v_proj`, `o_proj` as in Llama, so weights map onto HF
transformers. Training runs `F.scaled_dot_product_attention(is_causal=True)` with `enable_gqa`, so
K/V are never repeated in memory. Decoding with a cache attends with the mask that the cache gives:
a cache is anything with the `CacheLayer` interface per layer (the model's caches are in
`minimind/model/kv_cache.py`).
A `DocumentMask` confines attention to each token's own document within a packed window
(block-causal): a boolean mask for SDPA, or FlexAttention's block mask on CUDA, which skips the
blocks across documents.

`scale` multiplies the scores q·k (None: 1/sqrt(head_dim)); μP passes its own
(`minimind.model.mup.attention_scale`).

`qk_norm` (`none|rmsnorm|layernorm`, OLMo-core, modded-nanogpt): q and k are normalised per head,
over head_dim, before the rotation, by a registry norm of width head_dim shared by the heads
(`q_norm`, `k_norm`). It bounds the attention logits, which keeps high learning rates stable.
Keys enter the cache already normalised, so decoding needs nothing more.

Options, checks and counts are declared in `registry/declarations/attention.py`.
"""

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from registry.core import build
from registry.declarations import attention as declared
from registry.position import Rotate


class CacheLayer(Protocol):
    """One attention layer's cache, as attention uses it: `update` takes the new keys and values
    [B, Hkv, T, hd] (before any GQA repetition) and returns every key and value to attend to,
    with the boolean mask [T, S] of what each new query may see (True: allowed), or None where
    SDPA's own `is_causal` (T = S) or no mask (T = 1) is right."""

    def update(
        self, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]: ...


def causal_mask(n_queries: int, n_keys: int, device: torch.device | None = None) -> torch.Tensor:
    """Boolean mask [n_queries, n_keys], True where attention is allowed.

    Aligned bottom-right: query i is the token at absolute position n_keys - n_queries + i and sees
    keys 0..that position.
    """
    ones = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
    return ones.tril(diagonal=n_keys - n_queries)


@dataclass
class DocumentMask:
    """Block-causal attention over packed documents: query i sees key j iff j <= i and both are
    in the same document. `doc_ids` [B, T]: each token's document index within its row."""

    doc_ids: torch.Tensor
    _dense: torch.Tensor | None = field(default=None, repr=False)
    _block: object | None = field(default=None, repr=False)

    def dense(self) -> torch.Tensor:
        """Boolean mask [B, 1, T, T] (True where attention is allowed), built once per forward."""
        if self._dense is None:
            ids, length = self.doc_ids, self.doc_ids.size(1)
            same = ids[:, :, None] == ids[:, None, :]
            self._dense = (same & causal_mask(length, length, ids.device))[:, None]
        return self._dense

    def block(self) -> object:
        """FlexAttention's BlockMask of the same pattern, built once per forward."""
        if self._block is None:
            from torch.nn.attention.flex_attention import create_block_mask

            ids = self.doc_ids

            def same_document_causal(b, h, q, k):
                return (k <= q) & (ids[b, q] == ids[b, k])

            batch, length = ids.shape
            self._block = create_block_mask(
                same_document_causal, batch, None, length, length, device=ids.device
            )
        return self._block


def uses_flex_attention(device: torch.device) -> bool:
    """FlexAttention for document masks on CUDA when this torch has it; SDPA with a dense mask
    elsewhere (the CPU path)."""
    if device.type != "cuda":
        return False
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def document_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: DocumentMask,
    dropout: float,
    flex: bool,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention of q [B, H, T, hd] over k, v [B, Hkv, T, hd] within documents: [B, H, T, hd].
    `scale`: the score scale (None: 1/sqrt(hd))."""
    gqa = k.size(1) != q.size(1)
    if flex and dropout == 0.0:  # FlexAttention has no dropout
        attend = _compiled_flex_attention() if q.is_cuda else _flex_attention()
        return attend(q, k, v, block_mask=mask.block(), scale=scale, enable_gqa=gqa)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.dense(), dropout_p=dropout, enable_gqa=gqa, scale=scale
    )


def _flex_attention() -> Callable:
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention


@functools.cache
def _compiled_flex_attention() -> Callable:
    # Uncompiled, FlexAttention materialises the whole score matrix; compiled, it is a fused
    # kernel that skips the masked blocks (inside a compiled model this is traced through).
    return torch.compile(_flex_attention(), dynamic=False)


class CausalSelfAttention(declared.CausalSelfAttention, nn.Module):
    """Causal self-attention: x [B, T, dim] -> [B, T, dim]; subclasses choose `kv_heads`."""

    def __init__(
        self,
        options: declared.CausalSelfAttention.Options,
        *,
        dim: int,
        n_heads: int,
        n_kv_heads: int | None,
        head_dim: int,
        dropout: float = 0.0,  # none unless training asks for it
        scale: float | None = None,  # the score scale; None: SDPA's 1/sqrt(head_dim)
    ) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.dropout = n_heads, head_dim, dropout
        self.scale = scale
        self.n_kv_heads = self.kv_heads(n_heads, n_kv_heads)
        self.q_proj = nn.Linear(dim, n_heads * head_dim, bias=options.bias)
        self.k_proj = nn.Linear(dim, self.n_kv_heads * head_dim, bias=options.bias)
        self.v_proj = nn.Linear(dim, self.n_kv_heads * head_dim, bias=options.bias)
        self.o_proj = nn.Linear(n_heads * head_dim, dim, bias=options.bias)
        qk_norm = options.qk_norm != "none"
        self.q_norm = build("norm", options.qk_norm, dim=head_dim) if qk_norm else nn.Identity()
        self.k_norm = build("norm", options.qk_norm, dim=head_dim) if qk_norm else nn.Identity()
        self.resid_dropout = nn.Dropout(dropout)

    def project(
        self, x: torch.Tensor, rotate: Rotate
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, dim] -> q [B, H, T, hd], k and v [B, Hkv, T, hd]: q and k normalised
        (`qk_norm`) and rotated, as attention scores them (also read by `minimind.training.probes`)."""
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if not isinstance(self.q_norm, nn.Identity):
            # in float32, as the block norms see the float32 residual stream: under autocast q, k
            # are bf16 and the fused norm kernels need the input's dtype to match the gain's
            q, k = self.q_norm(q.float()).to(q.dtype), self.k_norm(k.float()).to(k.dtype)
        q, k = rotate(q, k)
        return q, k, v

    def forward(
        self,
        x: torch.Tensor,
        rotate: Rotate,
        cache: CacheLayer | None = None,
        doc_mask: DocumentMask | None = None,
    ) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim]; `rotate` holds the tokens' absolute positions; adds
        k, v to `cache`; `doc_mask` (training on packed documents, no cache) keeps attention
        within each document."""
        batch, length, _ = x.shape
        q, k, v = self.project(x, rotate)
        if doc_mask is not None:
            if cache is not None:
                raise ValueError("a document mask is for training windows, not cached decoding")
            dropout = self.dropout if self.training else 0.0
            flex = uses_flex_attention(x.device)
            y = document_attention(q, k, v, doc_mask, dropout, flex, self.scale)
            y = y.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim)
            return self.resid_dropout(self.o_proj(y))
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
            scale=self.scale,
        )
        y = y.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim)
        return self.resid_dropout(self.o_proj(y))


class MultiHeadAttention(declared.MultiHeadAttention, CausalSelfAttention):
    """`mha`: as many key/value heads as query heads."""


class MultiQueryAttention(declared.MultiQueryAttention, CausalSelfAttention):
    """`mqa`: one key/value head."""


class GroupedQueryAttention(declared.GroupedQueryAttention, CausalSelfAttention):
    """`gqa`: the config's n_kv_heads key/value heads."""
