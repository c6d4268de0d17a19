"""A data section prepared: one corpus or a weighted mixture of sources, and its held-out suite.

A mixture (`data.sources`) is prepared source by source through the one-corpus path
(`prepare.prepare_data`, each source with its own hold-out and cache entry), all with one
tokenizer: a BPE trained on a sample of the sources' training splits drawn in proportion to
their weights (`tokenizer.sample_bytes · weight` bytes of each, in corpus order). Its training
and validation splits are the union of the sources' (the validation split: `val/bpb`, the
mixture's own hold-out, total bits over total bytes); its batches draw a source per window with
the weights as probabilities (`batches.MixtureBatches`). A manifest of the mixture (each
source's weight, manifest hash and counts) names it like a corpus's manifest does.

`data.corpus` is a one-source mixture: a single source, through `data.corpus` or `data.sources`,
is that corpus prepared exactly as before, so its numbers do not change.

The suite (`data.eval_sets`): each set is the validation split of a corpus, tokenized with the
training tokenizer, or a training source's hold-out.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from itertools import chain
from pathlib import Path
from typing import Any

from minimind.data import prepare as one_corpus
from minimind.data.cache import cache_key
from minimind.data.config import DataConfig, TokenizerConfig
from minimind.data.prepare import CACHE_VERSION, PreparedData, manifest_hash, training_sample
from minimind.data.sources import open_corpus
from minimind.data.splits import HeldOut, Source
from minimind.data.tokenizer import train_bpe
from minimind.data.tokens import TokenStream
from minimind.foundations.atomic_file import atomic_write_text
from minimind.foundations.file_lock import creation_lock


def prepare_data(cfg: DataConfig, min_tokens: int = 0) -> PreparedData:
    """The data section `cfg` tokenized: its corpus or mixture and its evaluation sets, each
    step cached (`prepare.prepare_data`, which refuses a split of fewer than `min_tokens`
    tokens). Raises `DataError`."""
    sections = cfg.mixture()
    if len(sections) == 1:
        (section,) = sections.values()
        data = one_corpus.prepare_data(section, min_tokens)
        parts = {name: data for name in sections}
        _record_counts(cfg, {name: len(data.train_tokens) for name in sections})
    else:
        tokenizer = _mixture_tokenizer(cfg, sections)
        parts = {
            name: one_corpus.prepare_data(_with_tokenizer(section, tokenizer), min_tokens)
            for name, section in sections.items()
        }
        data = _union(cfg, parts)
    if not cfg.eval_sets:
        return data
    suite = {
        name: _eval_set(eval_set.source, parts, data.tokenizer_path)
        if eval_set.source is not None
        else _eval_set(cfg.one_corpus(eval_set), parts, data.tokenizer_path)
        for name, eval_set in cfg.eval_sets.items()
    }
    return replace(data, eval_sets=suite)


def source_train_tokens(cfg: DataConfig) -> dict[str, int] | None:
    """Each source's training tokens, from the cache `minimind data prepare` (or a run) filled
    for this section; None when it is not prepared yet. Reads no corpus."""
    path = Path(cfg.cache_dir) / "mixtures" / f"{_section_key(cfg)}.json"
    if not path.is_file():
        return None
    return {name: int(n) for name, n in json.loads(path.read_text()).items()}


def repeating_sources(cfg: DataConfig, tokens: int) -> dict[str, float] | None:
    """The sources a run of `tokens` training tokens would draw more than once: name -> the
    epochs it would see (weight · tokens over its training tokens); None when not prepared."""
    counts = source_train_tokens(cfg)
    if counts is None:
        return None
    weights = cfg.weights()
    epochs = {name: weights[name] * tokens / counts[name] for name in counts if counts[name]}
    return {name: e for name, e in epochs.items() if e > 1.0}


def _record_counts(cfg: DataConfig, counts: dict[str, int]) -> None:
    """Each source's training tokens, for `source_train_tokens` (the dry run)."""
    path = Path(cfg.cache_dir) / "mixtures" / f"{_section_key(cfg)}.json"
    atomic_write_text(path, json.dumps(counts))


def _section_key(cfg: DataConfig) -> str:
    """The cache name of a data section's per-source counts: its sources and hold-outs."""
    return cache_key(cfg.model_copy(update={"eval_sets": {}}).model_dump(mode="json"))


def _with_tokenizer(section: DataConfig, path: Path) -> DataConfig:
    return section.model_copy(update={"tokenizer": TokenizerConfig(path=str(path))})


def _mixture_tokenizer(cfg: DataConfig, sections: dict[str, DataConfig]) -> Path:
    """The path of the mixture's tokenizer: `tokenizer.path`, or a BPE trained (once, under a
    lock) on `tokenizer.sample_bytes` of the sources' training splits, split by weight."""
    if cfg.tokenizer.path is not None:
        return Path(cfg.tokenizer.path).expanduser()
    weights = cfg.weights()
    corpora = {name: open_corpus(section) for name, section in sections.items()}
    key = cache_key(
        {
            "version": CACHE_VERSION,
            "mixture": {name: [c.identity, weights[name]] for name, c in corpora.items()},
            "type": cfg.tokenizer.type,
            "vocab_size": cfg.tokenizer.vocab_size,
            "sample_bytes": cfg.tokenizer.sample_bytes,
        }
    )
    path = Path(cfg.cache_dir) / "tokenizers" / f"mix-{key}" / "tokenizer.json"
    with creation_lock(Path(cfg.cache_dir) / "locks" / f"mix-{key}"):
        if not path.is_file():
            sample = chain.from_iterable(
                training_sample(corpus, max(1, round(cfg.tokenizer.sample_bytes * weights[name])))
                for name, corpus in corpora.items()
            )
            start = time.perf_counter()
            tokenizer = train_bpe(sample, cfg.tokenizer.vocab_size)
            print(
                f"trained a {tokenizer.get_vocab_size()}-token BPE on up to "
                f"{cfg.tokenizer.sample_bytes:,} bytes of {len(corpora)} sources' training "
                f"splits, split by weight, in {time.perf_counter() - start:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            atomic_write_text(path, tokenizer.to_str())
    return path


def _union(cfg: DataConfig, parts: dict[str, PreparedData]) -> PreparedData:
    """The mixture: the sources' splits as one stream each, its own manifest and its sources."""
    weights = cfg.weights()
    first = next(iter(parts.values()))
    dtype = first.train_tokens.dtype
    sources = tuple(
        Source(name, weights[name], part.train_tokens, HeldOut(part.val_tokens, part.val_bytes))
        for name, part in parts.items()
    )
    mixture: dict[str, dict[str, Any]] = {
        name: {
            "weight": weights[name],
            "manifest": part.manifest_hash,
            "train": {"tokens": len(part.train_tokens), "bytes": part.train_bytes},
            "val": {"tokens": len(part.val_tokens), "bytes": part.val_bytes},
        }
        for name, part in parts.items()
    }
    totals = {
        split: {
            field: sum(source[split][field] for source in mixture.values())
            for field in ("tokens", "bytes")
        }
        for split in ("train", "val")
    }
    manifest = {"version": CACHE_VERSION, "mixture": mixture, "splits": totals}
    text = json.dumps(manifest, indent=1, sort_keys=True)
    directory = Path(cfg.cache_dir) / "tokens" / f"mix-{cache_key(manifest)}"
    atomic_write_text(directory / "manifest.json", text)
    _record_counts(cfg, {name: source["train"]["tokens"] for name, source in mixture.items()})
    return replace(
        first,
        corpus="+".join(parts),
        train_tokens=TokenStream(
            [p for part in parts.values() for p in part.train_tokens.paths], dtype
        ),
        val_tokens=TokenStream(
            [p for part in parts.values() for p in part.val_tokens.paths], dtype
        ),
        train_bytes=totals["train"]["bytes"],
        val_bytes=totals["val"]["bytes"],
        manifest_hash=manifest_hash(text),
        sources=sources,
    )


def _eval_set(
    origin: str | DataConfig,
    parts: dict[str, PreparedData],
    tokenizer: Path,
) -> HeldOut:
    """A training source's hold-out (`origin` its name), or the validation split of the corpus
    section `origin`, tokenized with the training tokenizer."""
    if isinstance(origin, str):
        part = parts[origin]
    else:
        part = one_corpus.prepare_data(_with_tokenizer(origin, tokenizer))
    return HeldOut(part.val_tokens, part.val_bytes)
