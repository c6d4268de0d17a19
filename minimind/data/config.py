"""The `data:` section of an experiment spec: which corpus, how it is read, held out, tokenized and
packed into windows.

Relative paths are taken relative to the current directory; a spec loader that wants them relative
to the spec file resolves them before validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from minimind.data.files import EMBEDDED_CORPORA, HUB_PREFIX, local_corpus_files
from minimind.foundations.strict_config import StrictNumbers

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


class DataConfig(StrictNumbers):
    """Corpus, tokenizer, validation hold-out, window packing and where prepared data is cached.

    `corpus` is an embedded name, a `.txt`/`.jsonl`/`.json`/`.parquet` file (optionally
    compressed), a directory or glob of such files, or `hf:<owner>/<name>` on the Hugging Face hub
    (with `config`, `split`, `text_field`, `streaming`). A corpus that has a `val_split` uses it;
    otherwise a seeded hold-out of `val_docs` documents, or of about `val_fraction` of them, is
    set aside (a single `.txt` file, one text, holds out its last `val_fraction` of bytes).
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

    @field_validator("corpus")
    @classmethod
    def _known_corpus(cls, corpus: str) -> str:
        if corpus in EMBEDDED_CORPORA:
            return corpus
        if corpus.startswith(HUB_PREFIX):
            if not corpus[len(HUB_PREFIX) :].strip():
                raise ValueError(
                    f"{HUB_PREFIX} needs a dataset name, e.g. hf:roneneldan/TinyStories"
                )
            return corpus
        local_corpus_files(corpus)  # raises ValueError naming what is wrong
        return corpus

    @model_validator(mode="after")
    def _streaming_hold_out_by_fraction(self) -> DataConfig:
        if self.streaming and self.val_docs is not None:
            # A count needs the corpus's size, which a stream does not know before the end.
            raise ValueError("val_docs: needs streaming: false (a stream holds out val_fraction)")
        return self
