"""The `data:` section of an experiment spec: which corpus, which tokenizer, how much to hold out.

Relative paths are taken relative to the current directory; a spec loader that wants them relative
to the spec file resolves them before validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Corpora shipped inside the package (name -> gzip file under minimind/data/corpora/).
EMBEDDED_CORPORA: dict[str, str] = {"tinyshakespeare": "tinyshakespeare.txt.gz"}

# Corpus files by suffix: `.txt` is one text; `.jsonl` and `.parquet` are lists of documents.
CORPUS_SUFFIXES: tuple[str, ...] = (".txt", ".jsonl", ".parquet")

# Byte-level BPE needs all 256 bytes plus the pad, bos and eos specials.
MIN_VOCAB_SIZE = 256 + 3
MAX_VOCAB_SIZE = 131_072


class TokenizerConfig(BaseModel):
    """A byte-level BPE trained on the training split, or an existing `tokenizer.json`.

    With `path`, the file is loaded as is and `vocab_size` is ignored (the loaded vocabulary wins).
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["bpe"] = "bpe"
    vocab_size: int = Field(default=2048, ge=MIN_VOCAB_SIZE, le=MAX_VOCAB_SIZE)
    path: str | None = None

    @field_validator("path")
    @classmethod
    def _existing_tokenizer_file(cls, path: str | None) -> str | None:
        if path is not None and not Path(path).expanduser().is_file():
            raise ValueError(f"tokenizer file not found: {path}")
        return path


class DataConfig(BaseModel):
    """Corpus, tokenizer, validation hold-out and where prepared data is cached."""

    model_config = ConfigDict(extra="forbid")

    corpus: str = "tinyshakespeare"
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    val_fraction: float = Field(default=0.1, gt=0.0, le=0.5)
    cache_dir: str = Field(default="results/cache", min_length=1)

    @field_validator("corpus")
    @classmethod
    def _known_corpus(cls, corpus: str) -> str:
        if corpus in EMBEDDED_CORPORA:
            return corpus
        path = Path(corpus).expanduser()
        if path.suffix.lower() not in CORPUS_SUFFIXES:
            raise ValueError(
                f"unsupported corpus {corpus!r}: use an embedded name "
                f"({', '.join(EMBEDDED_CORPORA)}) or a {', '.join(CORPUS_SUFFIXES)} file"
            )
        if not path.is_file():
            raise ValueError(f"corpus file not found: {corpus}")
        return corpus
