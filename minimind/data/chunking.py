"""Cutting long texts into bounded pieces that tokenize exactly as the whole text does.

Tokenizing in chunks lets `encode_batch` and the BPE trainer use every core, and bounds the
memory a document takes to tokenize (the tokenizer holds several hundred bytes per character of
its input: a 17 MB single-line document would need gigabytes whole). A cut is made after a newline
that has non-whitespace on both sides: byte-level BPE's pre-tokenizer (the GPT-2 pattern) always
isolates such a newline as its own piece, so no token can straddle the cut and the concatenated
ids equal those of the whole text. A text without such a newline in reach is cut before a single
space between non-spaces, which that pattern always starts a piece with (` word`, ` 42`, ` !`),
so that cut is exact too. A text without either within `MAX_CHUNK_FACTOR` targets is cut at the
first of either after that; only one without whitespace for `HARD_LIMIT_CHARS` is cut there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# Python's \s covers every Unicode White_Space character, so \S on both sides is conservative.
_SAFE_CUT = re.compile(r"(?<=\S)\n(?=\S)")
_SAFE_SPACE_CUT = re.compile(r"(?<=\S)(?= \S)")

CHUNK_CHARS = 1 << 16
# A piece is longer than this many targets only in a text without whitespace there,
MAX_CHUNK_FACTOR = 4
# and never longer than this (about 250 MB to tokenize).
HARD_LIMIT_CHARS = 1 << 20


def text_chunks(text: str, target_chars: int = CHUNK_CHARS) -> Iterator[str]:
    """Consecutive pieces of `text` of about `target_chars` characters, at most
    `MAX_CHUNK_FACTOR * target_chars` where the text has whitespace and never more than
    `max(that, HARD_LIMIT_CHARS)`, whose concatenation is `text`."""
    limit = MAX_CHUNK_FACTOR * target_chars
    hard = max(limit, HARD_LIMIT_CHARS)
    start = 0
    while len(text) - start > target_chars:
        reach = min(start + limit, len(text))
        cut = _SAFE_CUT.search(text, start + target_chars, reach)
        if cut is not None:
            stop = cut.end()
        elif len(text) - start <= limit:
            break
        else:
            stop = _space_cut(text, start + target_chars, reach, start + hard)
        yield text[start:stop]
        start = stop
    if start < len(text):
        yield text[start:]


def _space_cut(text: str, begin: int, reach: int, hard: int) -> int:
    """Where to cut a text with no safe newline in [begin, reach): before a safe space there,
    else at the first safe newline or space after, else at `hard`."""
    space = _SAFE_SPACE_CUT.search(text, begin, reach)
    if space is not None:
        return space.start()
    beyond = [
        found
        for found in (
            _SAFE_CUT.search(text, reach, hard),
            _SAFE_SPACE_CUT.search(text, reach, hard),
        )
        if found is not None
    ]
    if not beyond:
        return min(hard, len(text))
    first = min(beyond, key=lambda found: found.start())
    return first.end() if first.re is _SAFE_CUT else first.start()
