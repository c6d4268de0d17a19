"""`prepare_data`: corpus -> tokenizer -> token memmaps, each step cached on disk.

Cache layout under `DataConfig.cache_dir`:
  tokenizers/<key>/tokenizer.json      key: corpus SHA-256, val_fraction, tokenizer settings
  tokens/<key>/{train,val}.bin, meta.json   key: corpus SHA-256, val_fraction, tokenizer JSON hash
`meta.json` is written last, so its presence marks a complete entry.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from minimind.atomic_file import atomic_write_text
from minimind.data.cache import cache_key, sha256_hex
from minimind.data.config import DataConfig
from minimind.data.corpus import CorpusSplit, read_corpus, split_corpus
from minimind.data.tokenizer import load_tokenizer, special_ids, train_bpe
from minimind.data.tokens import read_tokens, token_dtype, write_tokens
from minimind.file_lock import creation_lock

log = logging.getLogger(__name__)

# Bump when the cached files' meaning changes, so old entries are not reused.
CACHE_VERSION = 1


@dataclass(frozen=True)
class PreparedData:
    """A tokenized corpus. The token arrays are read-only memmaps [n_tokens] of uint16/uint32.

    `vocab_size` is the tokenizer's (it may fall short of the configured size on a tiny corpus);
    the model's vocabulary must be at least this large. `val_bytes` is the exact UTF-8 byte count
    of the held-out text, for bits per byte.
    """

    tokenizer: Tokenizer
    tokenizer_path: Path
    vocab_size: int
    pad_id: int
    bos_id: int
    eos_id: int
    train_tokens: np.memmap
    val_tokens: np.memmap
    train_bytes: int
    val_bytes: int


def prepare_data(cfg: DataConfig) -> PreparedData:
    """Tokenize `cfg.corpus`, training or loading the tokenizer; reuse the cache when it matches.

    Processes preparing the same corpus at once (runs started together, sweep workers) take
    turns under one lock per corpus, so that the tokenizer is trained and the tokens are written
    once and the others reuse them.
    """
    raw = read_corpus(cfg.corpus)
    corpus_sha = sha256_hex(raw)
    with creation_lock(Path(cfg.cache_dir) / "locks" / corpus_sha[:16]):
        return _prepare(cfg, raw, corpus_sha)


def _prepare(cfg: DataConfig, raw: bytes, corpus_sha: str) -> PreparedData:
    split: CorpusSplit | None = None

    if cfg.tokenizer.path is not None:
        tokenizer_path = Path(cfg.tokenizer.path).expanduser()
        tokenizer = load_tokenizer(tokenizer_path)
    else:
        tokenizer_path = _tokenizer_dir(cfg, corpus_sha) / "tokenizer.json"
        if tokenizer_path.is_file():
            tokenizer = load_tokenizer(tokenizer_path)
        else:
            split = split_corpus(cfg.corpus, raw, cfg.val_fraction)
            tokenizer = _train_and_save(cfg, split, tokenizer_path)

    ids = special_ids(tokenizer)
    vocab_size = tokenizer.get_vocab_size()
    dtype = token_dtype(vocab_size)
    tokens_dir = _tokens_dir(cfg, corpus_sha, tokenizer)
    meta_path = tokens_dir / "meta.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
    else:
        split = split or split_corpus(cfg.corpus, raw, cfg.val_fraction)
        meta = _tokenize_and_save(cfg, split, tokenizer, ids.eos, dtype, tokens_dir)

    return PreparedData(
        tokenizer=tokenizer,
        tokenizer_path=tokenizer_path,
        vocab_size=vocab_size,
        pad_id=ids.pad,
        bos_id=ids.bos,
        eos_id=ids.eos,
        train_tokens=read_tokens(tokens_dir / "train.bin", np.dtype(meta["dtype"])),
        val_tokens=read_tokens(tokens_dir / "val.bin", np.dtype(meta["dtype"])),
        train_bytes=meta["train_bytes"],
        val_bytes=meta["val_bytes"],
    )


def _tokenizer_dir(cfg: DataConfig, corpus_sha: str) -> Path:
    key = cache_key(
        {
            "version": CACHE_VERSION,
            "corpus_sha256": corpus_sha,
            "val_fraction": cfg.val_fraction,  # the tokenizer sees the training split only
            "type": cfg.tokenizer.type,
            "vocab_size": cfg.tokenizer.vocab_size,
        }
    )
    return Path(cfg.cache_dir) / "tokenizers" / key


def _tokens_dir(cfg: DataConfig, corpus_sha: str, tokenizer: Tokenizer) -> Path:
    key = cache_key(
        {
            "version": CACHE_VERSION,
            "corpus_sha256": corpus_sha,
            "val_fraction": cfg.val_fraction,
            "tokenizer_sha256": sha256_hex(tokenizer.to_str()),
        }
    )
    return Path(cfg.cache_dir) / "tokens" / key


def _train_and_save(cfg: DataConfig, split: CorpusSplit, path: Path) -> Tokenizer:
    log.info("training a %d-token BPE on %s (training split)", cfg.tokenizer.vocab_size, cfg.corpus)
    start = time.perf_counter()
    tokenizer = train_bpe(split.train, cfg.tokenizer.vocab_size)
    log.info("trained the tokenizer in %.2f s", time.perf_counter() - start)
    atomic_write_text(path, tokenizer.to_str())
    return tokenizer


def _tokenize_and_save(
    cfg: DataConfig,
    split: CorpusSplit,
    tokenizer: Tokenizer,
    eos_id: int,
    dtype: np.dtype,
    tokens_dir: Path,
) -> dict:
    start = time.perf_counter()
    train_count = write_tokens(tokenizer, split.train, eos_id, dtype, tokens_dir / "train.bin")
    val_count = write_tokens(tokenizer, split.val, eos_id, dtype, tokens_dir / "val.bin")
    seconds = time.perf_counter() - start
    log.info(
        "tokenized %s: %d + %d tokens in %.2f s (%.2f MB/s)",
        cfg.corpus,
        train_count,
        val_count,
        seconds,
        (split.train_bytes + split.val_bytes) / 1e6 / max(seconds, 1e-9),
    )
    meta = {
        "corpus": cfg.corpus,
        "dtype": dtype.name,
        "train_tokens": train_count,
        "val_tokens": val_count,
        "train_bytes": split.train_bytes,
        "val_bytes": split.val_bytes,
        "vocab_size": tokenizer.get_vocab_size(),
    }
    atomic_write_text(tokens_dir / "meta.json", json.dumps(meta, indent=2))
    return meta
