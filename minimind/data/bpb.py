"""Bits per byte: the tokenizer-independent validation metric (docs/architecture.md, 'Measurement rules')."""

from __future__ import annotations

import math


def bits_per_byte(loss_nats_per_token: float, n_tokens: int, n_bytes: int) -> float:
    """loss · n_tokens / (ln 2 · n_bytes): the mean loss in nats per token turned into bits per byte.

    The final evaluation passes the summed loss over every scored held-out token (all but the
    split's first) with that count and the exact UTF-8 byte count of the held-out text
    (`data.val_bytes`); the periodic `*_sampled` estimate passes its mean over the fixed
    validation batches with the split's token count. Every document ends with an EOS token,
    which has no bytes, so predicting it is counted as part of predicting the text's bytes.
    """
    if n_tokens <= 0 or n_bytes <= 0:
        raise ValueError(f"need positive token and byte counts, got {n_tokens} and {n_bytes}")
    return loss_nats_per_token * n_tokens / (math.log(2) * n_bytes)
