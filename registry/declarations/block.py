"""block slot: `prenorm` and `postnorm` (implemented in `registry/block.py`).

`final_norm` says whether the model must normalise the last block's output before the LM head,
and `n_norms` how many norms a block builds (for parameter counts).
"""

from typing import ClassVar

from registry.core import register


class Block:
    final_norm: ClassVar[bool]
    n_norms: ClassVar[int] = 2


@register("block", "prenorm", implementation="registry.block:PreNormBlock")
class PreNormBlock(Block):
    final_norm = True


@register("block", "postnorm", implementation="registry.block:PostNormBlock")
class PostNormBlock(Block):
    final_norm = False
