"""Cutting long texts into pieces that tokenize exactly as the whole text does.

Tokenizing in chunks lets `encode_batch` and the BPE trainer use every core. A cut is made only
after a newline that has non-whitespace on both sides: byte-level BPE's pre-tokenizer (the GPT-2
pattern) always isolates such a newline as its own piece, so no token can straddle the cut and the
concatenated ids equal those of the whole text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# Python's \s covers every Unicode White_Space character, so \S on both sides is conservative.
_SAFE_CUT = re.compile(r"(?<=\S)\n(?=\S)")

CHUNK_CHARS = 1 << 16


def text_chunks(text: str, target_chars: int = CHUNK_CHARS) -> Iterator[str]:
    """Consecutive pieces of `text` of about `target_chars` characters whose concatenation is `text`."""
    start = 0
    while len(text) - start > target_chars:
        cut = _SAFE_CUT.search(text, start + target_chars)
        if cut is None:
            break
        yield text[start : cut.end()]
        start = cut.end()
    if start < len(text):
        yield text[start:]
