"""Byte-level BPE: training on the training split, loading a `tokenizer.json`, special tokens.

Pad, bos and eos are distinct added tokens that plain text can never produce: the tokenizer is
set to encode special-token strings found in text as ordinary bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from minimind.data.chunking import text_chunks

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    bos: int
    eos: int


def train_bpe(documents: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE of at most `vocab_size` tokens (ids 0, 1, 2 are pad, bos, eos).

    A small corpus may stop short of `vocab_size` when it runs out of pairs to merge.
    """
    tokenizer = Tokenizer(models.BPE())
    # No prefix space and no normaliser, so decode(encode(text)) == text for any text.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    chunks = (chunk for document in documents for chunk in text_chunks(document))
    tokenizer.train_from_iterator(chunks, trainer=trainer)
    return with_specials(tokenizer)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a `tokenizer.json`, adding pad, bos and eos tokens if it lacks them."""
    return with_specials(Tokenizer.from_file(str(Path(path).expanduser())))


def with_specials(tokenizer: Tokenizer) -> Tokenizer:
    """Ensure the three specials exist, and that special-token strings in text stay plain text."""
    missing = [token for token in (PAD, BOS, EOS) if tokenizer.token_to_id(token) is None]
    if missing:
        tokenizer.add_special_tokens(missing)
    tokenizer.encode_special_tokens = True  # not saved in tokenizer.json; set on every load
    return tokenizer


def special_ids(tokenizer: Tokenizer) -> SpecialIds:
    """The ids of pad, bos and eos in a tokenizer that went through `with_specials`."""
    pad, bos, eos = ids = [tokenizer.token_to_id(token) for token in (PAD, BOS, EOS)]
    if pad is None or bos is None or eos is None:
        raise ValueError(f"tokenizer lacks special tokens: {[PAD, BOS, EOS]} -> {ids}")
    return SpecialIds(pad, bos, eos)
