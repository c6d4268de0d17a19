"""Tokenizing a split once into a flat binary file of token ids, read back as a numpy memmap."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from minimind.atomic_file import atomic_open
from minimind.data.chunking import text_chunks

# Chunks handed to one encode_batch call: enough to keep every core busy, little memory.
BATCH_CHUNKS = 64


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def write_tokens(
    tokenizer: Tokenizer, documents: list[str], eos_id: int, dtype: np.dtype, path: Path
) -> int:
    """Tokenize `documents`, joined by `eos_id`, into `path` (atomically); return the token count.

    The file holds doc0 <eos> doc1 <eos> ... docN: EOS separates documents and is not appended to
    the last one, so a one-document (text) corpus holds exactly the text's tokens. Empty documents
    add nothing, not even a separator.
    """
    count = 0
    with atomic_open(path) as f:
        for ids in _encoded_documents(tokenizer, documents, eos_id):
            f.write(ids.astype(dtype, copy=False).tobytes())
            count += len(ids)
    return count


def read_tokens(path: Path, dtype: np.dtype) -> np.memmap:
    """The read-only memmap [n_tokens] of a file written by `write_tokens`."""
    return np.memmap(path, dtype=dtype, mode="r")


def _encoded_documents(
    tokenizer: Tokenizer, documents: list[str], eos_id: int
) -> Iterator[np.ndarray]:
    """Token ids in file order, one array per encode_batch call."""
    pieces = ((index, chunk) for index, doc in enumerate(documents) for chunk in text_chunks(doc))
    eos = np.array([eos_id], dtype=np.int64)
    previous = None
    while batch := list(islice(pieces, BATCH_CHUNKS)):
        encodings = tokenizer.encode_batch([chunk for _, chunk in batch], add_special_tokens=False)
        arrays = []
        for (index, _), encoding in zip(batch, encodings, strict=True):
            if previous is not None and index != previous:
                arrays.append(eos)
            previous = index
            arrays.append(np.asarray(encoding.ids, dtype=np.int64))
        yield np.concatenate(arrays)
