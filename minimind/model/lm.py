"""MiniMindLM: a decoder-only language model assembled from registry components.

    tokens -> embed_tokens -> position.embed -> dropout -> blocks -> norm -> lm_head -> logits

Under `model.parametrization: mup` the logits are multiplied by 1/m and attention scores by
sqrt(base_head_dim)/head_dim (`minimind.model.mup`). With `logit_softcap` set, the logits are cap·tanh(logits / cap) (Gemma 2, modded-nanogpt) for the
loss and for generation alike. `z_loss` is the auxiliary term the trainer may add (PaLM, OLMo).

Each block is built from the config's block, attention, mlp and norm; attention rotates q and k
with the `rotate` of `position.rotation(positions)`. The model never asks which kind of component
it holds: position modules offer `embed` and `rotation`, every mlp offers `aux_loss` and
`expert_load`, and the block says whether it needs a final norm.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import registry
from minimind.model import mup
from minimind.model.config import ModelConfig
from minimind.model.generation import RANDOM_SAMPLING, SamplingOptions, generate_tokens
from minimind.model.initialisation import InitialDraw, initial_draws, initialise
from minimind.model.kv_cache import KVCache, StaticKVCache, positions_after
from minimind.model.loss import IGNORE_INDEX, chunked_loss_sum, loss_sums, soft_cap
from registry.attention import DocumentMask


@dataclass
class LMOutput:
    # [B, T, padded_vocab_size]; ids >= config.vocab_size are never targets. None when the loss
    # was computed in chunks (`loss_chunk_tokens`), which never holds every token's logits.
    logits: torch.Tensor | None
    loss: torch.Tensor | None  # 0-dim mean cross-entropy over non-ignored targets, or None
    aux_loss: torch.Tensor  # 0-dim sum of the mlps' auxiliary losses (already scaled); 0 if dense
    # 0-dim mean of logsumexp(logits)² over the targets (PaLM's z-loss, unscaled), when asked for
    z_loss: torch.Tensor | None = None


class MiniMindLM(nn.Module):
    # Any: a position kind, a plugin's too, is any module with `embed` and `rotation`
    # (registry/position.py, PositionModule).
    position: Any

    def __init__(self, config: ModelConfig, init_seed: int | None = None) -> None:
        """`init_seed`: the seed of every parameter's own stream (`minimind.model.initialisation`:
        tensors two configs have in common start identical); None draws it from torch's global
        generator, so that `torch.manual_seed(s)` before building still fixes the weights."""
        super().__init__()
        self.config = config
        # padded rows (see ModelConfig.padded_vocab_size): aligned GEMM shapes for the head
        self.embed_tokens = nn.Embedding(config.padded_vocab_size, config.dim)
        self.position = registry.build("position", config.position, **config.slot_dims("position"))
        self.dropout = nn.Dropout(config.dropout)

        def norm() -> nn.Module:
            return registry.build("norm", config.norm, **config.slot_dims("norm"))

        # μP's attention scale, given to attention only when it differs from SDPA's default
        scale = mup.attention_scale(config)
        attention_scale = {} if scale is None else {"scale": scale}

        self.layers = nn.ModuleList(
            registry.build(
                "block",
                config.block,
                attention=registry.build(
                    "attention",
                    config.attention,
                    **config.slot_dims("attention"),
                    **attention_scale,
                ),
                mlp=registry.build("mlp", config.mlp, **config.slot_dims("mlp")),
                norm=norm,
            )
            for _ in range(config.n_layers)
        )
        self.norm = norm() if type(self._blocks()[0]).final_norm else nn.Identity()
        self.lm_head = nn.Linear(config.dim, config.padded_vocab_size, bias=False)
        self.output_multiplier = mup.output_multiplier(config)  # 1/m under μP, else 1
        if init_seed is None:
            init_seed = int(torch.randint(2**62, (), device="cpu").item())
        # `config.init`'s scheme, each tensor from its own stream, before the head is tied
        draws = initial_draws(self, config)
        initialise(self, draws, init_seed)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        # the draw of each parameter the model holds (the tied head is the embedding)
        self.initial_draws: dict[str, InitialDraw] = {
            name: draws[name] for name, _ in self.named_parameters()
        }

    def new_cache(self) -> KVCache:
        """An empty KV cache for incremental decoding with `forward(..., cache=...)`."""
        device = self.embed_tokens.weight.device
        return KVCache(self.config.n_layers, self.config.max_seq_len, device)

    def new_static_cache(self, capacity: int) -> StaticKVCache:
        """An empty preallocated cache for up to `capacity` <= max_seq_len tokens, on the model's
        device, for `forward(..., cache=...)` with shapes fixed from token to token."""
        if not 1 <= capacity <= self.config.max_seq_len:
            raise ValueError(
                f"capacity must be in [1, max_seq_len={self.config.max_seq_len}], got {capacity}"
            )
        device = self.embed_tokens.weight.device
        return StaticKVCache(self.config.n_layers, capacity, device)

    def num_params(self) -> int:
        """Parameters actually allocated (shared tensors counted once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        cache: KVCache | StaticKVCache | None = None,
        doc_ids: torch.Tensor | None = None,
        loss_chunk_tokens: int | None = None,
        with_z_loss: bool = False,
    ) -> LMOutput:
        """input_ids [B, T]; labels [B, T] aligned with the inputs (shifted here, -100 ignored).

        With `cache` (`new_cache` or `new_static_cache`), input_ids are the tokens after the
        cached ones; their keys and values are added to the cache and their positions start at
        the cache length. With `doc_ids` [B, T] (each token's document within its row:
        `minimind.data.document_ids`), attention does not cross documents; positions still count
        from the window's start.
        With labels and `loss_chunk_tokens`, the LM head and the loss run that many tokens at a
        time (`minimind.model.loss.chunked_loss_sum`) and no logits are returned. `model.logit_softcap`
        caps the logits for the loss and for generation; `with_z_loss` adds the z-loss term.
        """
        length = input_ids.size(1)
        if cache is None:
            positions = positions_after(0, length, self.config.max_seq_len, input_ids.device)
        else:
            positions = cache.positions(length)
        x = self.dropout(self.position.embed(self.embed_tokens(input_ids), positions))
        rotate = self.position.rotation(positions)  # rotary cos/sin once for all layers
        doc_mask = DocumentMask(doc_ids) if doc_ids is not None else None  # one for all layers
        for i, layer in enumerate(self.layers):
            layer_cache = cache.layers[i] if cache is not None else None
            x = layer(x, rotate, layer_cache, doc_mask)
        hidden = self.norm(x)
        if self.output_multiplier != 1.0:
            # μP's logit multiplier, on the head's input: the same logits, and the chunked loss
            # (which takes the head's weight, not the head) gets it too
            hidden = hidden * self.output_multiplier
        cap = self.config.logit_softcap
        chunked = labels is not None and loss_chunk_tokens is not None
        logits = None
        if not chunked:
            logits = self.lm_head(hidden)
            logits = soft_cap(logits, cap) if cap is not None else logits
        loss = z_loss_mean = None
        if labels is not None:
            targets = self._targets(labels)
            if loss_chunk_tokens is not None:  # chunked
                # the cap goes inside each chunk, which is all the chunked path ever holds
                terms = functools.partial(loss_sums, softcap=cap, with_z_loss=with_z_loss)
                sums = chunked_loss_sum(
                    hidden.flatten(0, 1), self.lm_head.weight, targets, loss_chunk_tokens, terms
                )
            else:
                assert logits is not None  # not chunked
                sums = loss_sums(logits.flatten(0, 1).float(), targets, with_z_loss=with_z_loss)
            scored = (targets != IGNORE_INDEX).sum()
            if with_z_loss:
                loss, z_loss_mean = sums[0] / scored, sums[1] / scored
            else:
                loss = sums / scored
        aux_losses = (block.mlp.aux_loss for block in self._blocks())
        aux_loss = sum((aux for aux in aux_losses if aux is not None), x.new_zeros(()))
        return LMOutput(logits=logits, loss=loss, aux_loss=aux_loss, z_loss=z_loss_mean)

    @staticmethod
    def _targets(labels: torch.Tensor) -> torch.Tensor:
        """labels [B, T] -> the target of each position [B * T]: the next label, IGNORE_INDEX at
        the last position.

        Shift the labels, not the logits: slicing logits[:, :-1] would copy the largest
        activation of the step (and its gradient); the last position simply has no target.
        """
        return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX).flatten()

    def _blocks(self) -> list[Any]:
        """The blocks. Any: a block kind, a plugin's too, is any module with `final_norm` and an
        `mlp`, itself any mlp kind, which sets `aux_loss` and `expert_load`, each a tensor or None
        (registry/mlp.py)."""
        return list(self.layers)

    def moe_load(self) -> torch.Tensor | None:
        """[n_moe_layers, n_experts]: each layer's share of routed assignments in the last forward."""
        loads = [
            block.mlp.expert_load for block in self._blocks() if block.mlp.expert_load is not None
        ]
        return torch.stack(loads) if loads else None

    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        sampling: SamplingOptions | None = None,
        *,
        stream: bool = False,
        cache: str = "dynamic",
        compile_decode: bool = False,
        generator: torch.Generator | None = None,
        **sampling_options: Any,
    ) -> torch.Tensor | Iterator[torch.Tensor]:
        """Continue input_ids [B, T] by up to `max_new_tokens` tokens chosen by `sampling`
        (`minimind.model.generation.GREEDY` for greedy decoding), or by the fields of
        `SamplingOptions` given as keywords, as `transformers` users write them:
        `generate(ids, max_new_tokens=50, temperature=0.8, top_k=40)` (validated alike).

        Returns [B, T + n] (n < max_new_tokens when every row reached `sampling.eos_token_id`; a
        finished row is padded with EOS), or with `stream=True` an iterator of [B, 1] tokens, one
        step at a time, whose concatenation after input_ids is that same tensor. `cache`: `static`,
        `dynamic` or `none`; `compile_decode` compiles the static cache's one-token step. See
        `minimind.model.generation`.
        """
        if sampling is not None and sampling_options:
            raise TypeError(
                "give the sampling either as SamplingOptions or as keywords "
                f"({', '.join(sampling_options)}), not both"
            )
        if sampling is None:  # dataclasses.replace validates through SamplingOptions itself
            sampling = dataclasses.replace(RANDOM_SAMPLING, **sampling_options)
        tokens = generate_tokens(
            self,
            input_ids,
            max_new_tokens,
            sampling,
            cache=cache,
            compile_decode=compile_decode,
            generator=generator,
        )
        if stream:
            return tokens
        return torch.cat([input_ids, *tokens], dim=1)
