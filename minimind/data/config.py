"""The `data:` section of an experiment spec: which corpus, how it is read, held out, tokenized and
packed into windows.

Relative paths are taken relative to the current directory; a spec loader that wants them relative
to the spec file resolves them before validation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from minimind.data.files import EMBEDDED_CORPORA, HUB_PREFIX, local_corpus_files
from minimind.foundations.strict_config import StrictNumbers, field_error

# Byte-level BPE needs all 256 bytes plus the pad, bos and eos specials.
MIN_VOCAB_SIZE = 256 + 3
MAX_VOCAB_SIZE = 131_072


class TokenizerConfig(StrictNumbers):
    """A byte-level BPE trained on a sample of the training split, or an existing
    `tokenizer.json`.

    With `path`, the file is loaded as is and `vocab_size` is ignored (the loaded vocabulary wins).
    `sample_bytes` bounds the UTF-8 bytes of training text the BPE trainer reads.
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["bpe"] = "bpe"
    vocab_size: int = Field(default=2048, ge=MIN_VOCAB_SIZE, le=MAX_VOCAB_SIZE)
    path: str | None = None
    sample_bytes: int = Field(default=256 * 10**6, ge=1)

    @field_validator("path")
    @classmethod
    def _existing_tokenizer_file(cls, path: str | None) -> str | None:
        if path is not None and not Path(path).expanduser().is_file():
            raise ValueError(f"tokenizer file not found: {path}")
        return path


# Source and evaluation-set names: they become parts of metric names (`val/<name>/bpb`).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# Corpus fields of `DataConfig` that a mixture's source or an evaluation set sets for itself.
CORPUS_FIELDS = ("corpus", "config", "split", "val_split", "text_field", "streaming")
HOLD_OUT_FIELDS = ("val_fraction", "val_docs")


class CorpusFields(StrictNumbers):
    """A corpus as `data.corpus` takes it (with its options) and its hold-out, for a mixture's
    source or an evaluation set; a hold-out field left out takes the data section's."""

    model_config = ConfigDict(extra="forbid")

    corpus: str
    config: str | None = None
    split: str = Field(default="train", min_length=1)
    val_split: str = Field(default="validation", min_length=1)
    text_field: str = Field(default="text", min_length=1)
    streaming: bool = False
    val_fraction: float | None = Field(default=None, gt=0.0, le=0.5)
    val_docs: int | None = Field(default=None, ge=1)

    @field_validator("corpus")
    @classmethod
    def _known_corpus(cls, corpus: str) -> str:
        return _checked_corpus(corpus)


class SourceConfig(CorpusFields):
    """One source of a training mixture: a corpus and its `weight`, the share of training tokens
    drawn from it (the weights are normalised to sum to 1)."""

    weight: float = Field(gt=0.0)


class EvalSetConfig(StrictNumbers):
    """A held-out set scored like `val/bpb`: the validation split of a `corpus` (any corpus
    `data.corpus` takes, with its options), or the hold-out of the training mixture's `source`."""

    model_config = ConfigDict(extra="forbid")

    source: str | None = None
    corpus: str | None = None
    config: str | None = None
    split: str = Field(default="train", min_length=1)
    val_split: str = Field(default="validation", min_length=1)
    text_field: str = Field(default="text", min_length=1)
    streaming: bool = False
    val_fraction: float | None = Field(default=None, gt=0.0, le=0.5)
    val_docs: int | None = Field(default=None, ge=1)

    @field_validator("corpus")
    @classmethod
    def _known_corpus(cls, corpus: str | None) -> str | None:
        return None if corpus is None else _checked_corpus(corpus)

    @model_validator(mode="after")
    def _one_origin(self) -> EvalSetConfig:
        if (self.source is None) == (self.corpus is None):
            raise ValueError("give either corpus (a held-out corpus) or source (a training source)")
        fields = type(self).model_fields
        extra = [f for f in fields if f != "source" and getattr(self, f) != fields[f].default]
        if self.source is not None and extra:
            raise ValueError(f"a source's hold-out takes no corpus options ({', '.join(extra)})")
        return self


def _checked_corpus(corpus: str) -> str:
    """`corpus` when it is an embedded name, a hub name or existing local files; raises
    ValueError naming what is wrong."""
    if corpus in EMBEDDED_CORPORA:
        return corpus
    if corpus.startswith(HUB_PREFIX):
        if not corpus[len(HUB_PREFIX) :].strip():
            raise ValueError(f"{HUB_PREFIX} needs a dataset name, e.g. hf:roneneldan/TinyStories")
        return corpus
    local_corpus_files(corpus)  # raises ValueError naming what is wrong
    return corpus


def _checked_names(kind: str, names: list[str]) -> None:
    for name in names:
        if not NAME_PATTERN.fullmatch(name):
            field_error((kind, name), "a name of letters, digits, _ and - (it names metrics)")


class DataConfig(StrictNumbers):
    """Corpus, tokenizer, validation hold-out, window packing and where prepared data is cached.

    `corpus` is an embedded name, a `.txt`/`.jsonl`/`.json`/`.parquet` file (optionally
    compressed), a directory or glob of such files, or `hf:<owner>/<name>` on the Hugging Face hub
    (with `config`, `split`, `text_field`, `streaming`). A corpus that has a `val_split` uses it;
    otherwise a seeded hold-out of `val_docs` documents, or of about `val_fraction` of them, is
    set aside (a single `.txt` file, one text, holds out its last `val_fraction` of bytes).

    `sources` replaces `corpus` with a weighted mixture (name -> a corpus and its `weight`), each
    source with its own hold-out; `eval_sets` names held-out sets scored besides `val/bpb`
    (`minimind.data.mixture`; docs/architecture.md, 'Data preparation').
    """

    model_config = ConfigDict(extra="forbid")

    corpus: str = "tinyshakespeare"
    config: str | None = None
    split: str = Field(default="train", min_length=1)
    val_split: str = Field(default="validation", min_length=1)
    text_field: str = Field(default="text", min_length=1)
    streaming: bool = False
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    val_fraction: float = Field(default=0.1, gt=0.0, le=0.5)
    val_docs: int | None = Field(default=None, ge=1)
    val_seed: int = Field(default=0, ge=0)
    num_proc: int | None = Field(default=None, ge=1)
    bos_align: bool = False
    doc_mask: bool = False
    cache_dir: str = Field(default="results/cache", min_length=1)

    sources: dict[str, SourceConfig] | None = None
    eval_sets: dict[str, EvalSetConfig] = Field(default_factory=dict)

    @field_validator("corpus")
    @classmethod
    def _known_corpus(cls, corpus: str) -> str:
        return _checked_corpus(corpus)

    @model_validator(mode="after")
    def _mixture_and_suite(self) -> DataConfig:
        if self.sources is not None:
            if not self.sources:
                field_error(("sources",), "name at least one source")
            _checked_names("sources", list(self.sources))
            # Compared with the defaults: a validated variant's tree names every field.
            fields = type(self).model_fields
            given = [f for f in CORPUS_FIELDS if getattr(self, f) != fields[f].default]
            if given:
                field_error(
                    (sorted(given)[0],),
                    "give the corpus in data.sources or here, not both (a source takes its own)",
                )
        _checked_names("eval_sets", list(self.eval_sets))
        for name, eval_set in self.eval_sets.items():
            if eval_set.source is not None and eval_set.source not in self.mixture():
                field_error(
                    ("eval_sets", name, "source"),
                    f"no training source {eval_set.source!r} (sources: "
                    f"{', '.join(self.mixture())})",
                )
        return self

    @model_serializer(mode="wrap")
    def _without_an_unused_mixture(self, handler: SerializerFunctionWrapHandler) -> dict:
        """Without `sources` and `eval_sets` when unset: a spec written before them keeps its
        content hash, params and data key."""
        dumped = handler(self)
        if self.sources is None:
            dumped.pop("sources", None)
        if not self.eval_sets:
            dumped.pop("eval_sets", None)
        return dumped

    def mixture(self) -> dict[str, DataConfig]:
        """Each training source as a one-corpus data section (its corpus and hold-out, this
        section's tokenizer and packing), by name; `data.corpus` is the one source `corpus`."""
        if self.sources is None:
            return {"corpus": self.model_copy(update={"eval_sets": {}})}
        return {name: self.one_corpus(source) for name, source in self.sources.items()}

    def weights(self) -> dict[str, float]:
        """The sources' sampling probabilities over training tokens, by name (summing to 1)."""
        if self.sources is None:
            return {"corpus": 1.0}
        total = sum(source.weight for source in self.sources.values())
        return {name: source.weight / total for name, source in self.sources.items()}

    def one_corpus(self, fields: CorpusFields | EvalSetConfig) -> DataConfig:
        """This section with the corpus and hold-out of `fields` (a source or evaluation set),
        no mixture and no suite."""
        update: dict = {name: getattr(fields, name) for name in CORPUS_FIELDS}
        for name in HOLD_OUT_FIELDS:
            if getattr(fields, name) is not None:
                update[name] = getattr(fields, name)
        return self.model_copy(update={**update, "sources": None, "eval_sets": {}})

    @model_validator(mode="after")
    def _streaming_hold_out_by_fraction(self) -> DataConfig:
        if self.streaming and self.val_docs is not None:
            # A count needs the corpus's size, which a stream does not know before the end.
            raise ValueError("val_docs: needs streaming: false (a stream holds out val_fraction)")
        return self
