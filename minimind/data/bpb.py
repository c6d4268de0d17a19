"""Bits per byte: the tokenizer-independent validation metric (docs/architecture.md, 'Measurement rules')."""

from __future__ import annotations

import math


def bits_per_byte(loss_nats_per_token: float, n_tokens: int, n_bytes: int) -> float:
    """loss · n_tokens / (ln 2 · n_bytes): the mean loss in nats per token turned into bits per byte.

    The runner passes the mean validation loss over the fixed validation batches together with the
    token count and the exact UTF-8 byte count of the whole held-out split
    (`len(data.val_tokens)`, `data.val_bytes`): the loss is an estimate of the split's mean loss
    per token, and tokens / bytes is the split's exact ratio. For a document corpus the token count
    includes the EOS separators, which have no bytes, so the figure errs on the high side.
    """
    if n_tokens <= 0 or n_bytes <= 0:
        raise ValueError(f"need positive token and byte counts, got {n_tokens} and {n_bytes}")
    return loss_nats_per_token * n_tokens / (math.log(2) * n_bytes)
