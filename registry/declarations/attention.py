"""attention slot: `mha`, `mqa` and `gqa`, differing only in key/value heads (implemented in
`registry/attention.py`)."""

from dataclasses import dataclass
from typing import Literal

from registry.core import count_params, register


class CausalSelfAttention:
    """Subclasses choose `kv_heads`."""

    @dataclass(frozen=True)
    class Options:
        bias: bool = False
        qk_norm: Literal["none", "rmsnorm", "layernorm"] = "none"

    @staticmethod
    def kv_heads(n_heads: int, n_kv_heads: int | None) -> int:
        raise NotImplementedError

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
        dropout: float = 0.0,  # none unless training asks for it
        scale: float | None = None,  # the score scale holds no parameter
    ) -> int:
        q_width, kv_width = n_heads * head_dim, cls.kv_heads(n_heads, n_kv_heads) * head_dim
        weights = 2 * dim * q_width + 2 * dim * kv_width
        biases = q_width + 2 * kv_width + dim
        norms = 0
        if options.qk_norm != "none":
            norms = 2 * count_params("norm", options.qk_norm, dim=head_dim)
        return weights + (biases if options.bias else 0) + norms


@register("attention", "mha", implementation="registry.attention:MultiHeadAttention")
class MultiHeadAttention(CausalSelfAttention):
    """Every query head has its own key/value head (n_kv_heads = n_heads; the config's is unused)."""

    @staticmethod
    def kv_heads(n_heads: int, n_kv_heads: int | None) -> int:
        return n_heads


@register("attention", "mqa", implementation="registry.attention:MultiQueryAttention")
class MultiQueryAttention(CausalSelfAttention):
    """All query heads share one key/value head (n_kv_heads = 1; the config's is unused)."""

    @staticmethod
    def kv_heads(n_heads: int, n_kv_heads: int | None) -> int:
        return 1


@register("attention", "gqa", implementation="registry.attention:GroupedQueryAttention")
class GroupedQueryAttention(CausalSelfAttention):
    """Groups of n_heads / n_kv_heads query heads share a key/value head (the config's n_kv_heads)."""

    @staticmethod
    def kv_heads(n_heads: int, n_kv_heads: int | None) -> int:
        if n_kv_heads is None:
            raise ValueError("gqa needs n_kv_heads (the number of key/value heads)")
        return n_kv_heads
