"""block slot: `prenorm` and `postnorm` residual blocks around one attention and one mlp.

A block is given its attention and mlp modules and a norm factory; it keeps them as `attn`, `mlp`,
`attn_norm` and `mlp_norm`; `final_norm` and `n_norms` are declared in
`registry/declarations/block.py`. A plugin block subclasses `Block` and owns no parameters beyond
these parts.
"""

from collections.abc import Callable

import torch
from torch import nn

from registry.attention import CacheLayer, DocumentMask
from registry.declarations import block as declared
from registry.position import Rotate


class Block(declared.Block, nn.Module):
    """Holds the parts; subclasses define the residual wiring."""

    def __init__(
        self, *, attention: nn.Module, mlp: nn.Module, norm: Callable[[], nn.Module]
    ) -> None:
        super().__init__()
        self.attn_norm, self.attn = norm(), attention
        self.mlp_norm, self.mlp = norm(), mlp


class PreNormBlock(declared.PreNormBlock, Block):
    """x + attn(norm(x)), then x + mlp(norm(x)) (GPT-2, Llama); the model adds a final norm."""

    def forward(
        self,
        x: torch.Tensor,
        rotate: Rotate,
        cache: CacheLayer | None = None,
        doc_mask: DocumentMask | None = None,
    ) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim]."""
        x = x + self.attn(self.attn_norm(x), rotate, cache, doc_mask)
        return x + self.mlp(self.mlp_norm(x))


class PostNormBlock(declared.PostNormBlock, Block):
    """norm(x + attn(x)), then norm(x + mlp(x)) (the original Transformer); no final norm."""

    def forward(
        self,
        x: torch.Tensor,
        rotate: Rotate,
        cache: CacheLayer | None = None,
        doc_mask: DocumentMask | None = None,
    ) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim]."""
        x = self.attn_norm(x + self.attn(x, rotate, cache, doc_mask))
        return self.mlp_norm(x + self.mlp(x))
