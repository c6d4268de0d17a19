"""`MiniMindConfig`: the Hugging Face config of an exported MiniMind model whose components have no
exact architecture in transformers (written beside `modeling_minimind.py` by `minimind export`).

It imports transformers only, so that an export loads where the harness is not installed. The five
component slots hold the harness's canonical names with every option filled in, and the widths
resolved (`mlp.hidden`, `attention.n_kv_heads`), e.g.
`{"name": "rope", "style": "gptj", "theta": 10000.0, "fraction": 1.0}`.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig


class MiniMindConfig(PretrainedConfig):
    model_type = "minimind"

    def __init__(
        self,
        vocab_size: int = 2048,
        real_vocab_size: int | None = None,
        hidden_size: int = 64,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 4,
        head_dim: int = 16,
        max_position_embeddings: int = 256,
        norm: dict[str, Any] | None = None,
        position: dict[str, Any] | None = None,
        attention: dict[str, Any] | None = None,
        mlp: dict[str, Any] | None = None,
        block: str = "prenorm",
        logit_softcap: float | None = None,
        tie_word_embeddings: bool = True,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size  # rows of the embedding and LM head (padded)
        self.real_vocab_size = real_vocab_size or vocab_size  # ids a tokenizer may produce
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.head_dim = head_dim
        self.max_position_embeddings = max_position_embeddings
        self.norm = norm or {"name": "rmsnorm", "eps": 1e-5}
        self.position = position or {"name": "rope", "style": "neox", "theta": 1e4, "fraction": 1.0}
        self.attention = attention or {"n_kv_heads": num_attention_heads, "bias": False}
        self.attention.setdefault("qk_norm", "none")
        self.mlp = mlp or {"name": "swiglu", "hidden": 192, "bias": False}
        self.block = block
        self.logit_softcap = logit_softcap
        self.num_key_value_heads = self.attention["n_kv_heads"]  # read by HF's cache utilities
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)  # type: ignore[call-arg]
