"""Which files a local corpus names, and the `datasets` builder that reads them.

A corpus path is one file, a directory (every corpus file under it, recursively) or a glob. All its
files share one format: `.txt` (each file one document), `.jsonl`/`.json` (one document per
record) or `.parquet` (one per row), each optionally compressed as `datasets` reads them.
"""

from __future__ import annotations

import glob
from pathlib import Path

# Corpora shipped inside the package (name -> gzip file under minimind/data/corpora/).
EMBEDDED_CORPORA: dict[str, str] = {"tinyshakespeare": "tinyshakespeare.txt.gz"}

HUB_PREFIX = "hf:"

# File suffix -> the `datasets` packaged builder that reads it.
BUILDERS: dict[str, str] = {
    ".txt": "text",
    ".jsonl": "json",
    ".json": "json",
    ".parquet": "parquet",
}
COMPRESSIONS: tuple[str, ...] = (".gz", ".bz2", ".xz", ".zst")


def file_builder(path: str | Path) -> str | None:
    """The builder of a corpus file by its suffix (after a compression suffix), else None."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes.pop()
    return BUILDERS.get(suffixes[-1]) if suffixes else None


def local_corpus_files(corpus: str) -> tuple[str, list[Path]]:
    """(builder, sorted files) of a local corpus; raises ValueError saying what is wrong."""
    path = Path(corpus).expanduser()
    kinds = ", ".join(BUILDERS)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and file_builder(p))
        if not files:
            raise ValueError(f"directory {corpus} holds no corpus files ({kinds})")
    elif glob.has_magic(str(path)):
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        if not files:
            raise ValueError(f"glob {corpus} matches no files")
    else:
        if file_builder(path) is None:
            raise ValueError(
                f"unsupported corpus {corpus!r}: use an embedded name "
                f"({', '.join(EMBEDDED_CORPORA)}), {HUB_PREFIX}<owner>/<name>, or {kinds} "
                "files (a file, a directory or a glob)"
            )
        if path.exists() and not path.is_file():  # a FIFO, a socket, a device
            raise ValueError(f"corpus {corpus} is not a regular file")
        if not path.is_file():
            raise ValueError(f"corpus file not found: {corpus}")
        files = [path]
    builders: set[str] = set()
    for file in files:
        builder = file_builder(file)
        if builder is None:
            raise ValueError(f"unsupported corpus file {file} (use {kinds})")
        builders.add(builder)
    if len(builders) > 1:
        raise ValueError(f"corpus {corpus} mixes formats ({', '.join(sorted(builders))})")
    return builders.pop(), files
