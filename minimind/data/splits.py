"""What a mixture's sources and a suite's evaluation sets are once tokenized."""

from __future__ import annotations

from dataclasses import dataclass

from minimind.data.tokens import TokenStream


@dataclass(frozen=True)
class HeldOut:
    """A held-out split scored in bits per byte: its tokens [n_tokens] and the exact UTF-8 bytes
    of its text."""

    tokens: TokenStream
    n_bytes: int


@dataclass(frozen=True)
class Source:
    """One source of a training mixture: its name, its share of the training tokens (`weight`,
    the weights summing to 1), its training split [n_tokens] and its hold-out."""

    name: str
    weight: float
    train_tokens: TokenStream
    val: HeldOut
