"""`minimind data assemble`: a multi-domain corpus from installed packages (`domains.DOMAINS`).

OUT gets one folder per domain, `train.jsonl` and `validation.jsonl` (a `{"text": ...}` record
per document, so `data.corpus: OUT/<domain>` reads both splits), and `manifest.json`: per domain
the package, registry, version, the sha256 of everything read, the licence, the cleaning, and the
documents and UTF-8 bytes of each split.

Documents are deduplicated by the sha256 of their text across all domains (the first domain in
`DOMAINS` order keeps a document), then held out per domain by that hash: a document is held out
when a seeded hash of its text falls below `val_fraction` of 2^64, so the same text is held out
wherever it occurs and no held-out text is in training. OUT is written beside itself and renamed
into place: a failed assembly leaves nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from minimind.data.domains import DOMAINS, Domain, Found, Places, read_inputs
from minimind.foundations.errors import MinimindError

DEFAULT_VAL_FRACTION = 0.05
SPLIT_FILES = {"train": "train.jsonl", "val": "validation.jsonl"}


class AssemblyError(MinimindError, ValueError):
    """A user's mistake: an unknown domain, a missing package asked for, an existing OUT."""


@dataclass(frozen=True)
class Missing:
    """A domain that cannot be read: its package is not installed, or (`module`) the package is
    but the Python module its reader imports is not."""

    domain: Domain
    module: str | None = None

    def remedy(self) -> str:
        """The command that installs what is missing (the module comes with extra `corpora`)."""
        return f"pip install {self.module}" if self.module else self.domain.install

    def line(self) -> str:
        d = self.domain
        if self.module is not None:
            return f"{d.name}: reading it needs the Python package {self.module} ({self.remedy()})"
        return f"{d.name}: {d.registry} package {d.package} is not installed ({self.remedy()})"


def locate(domain: Domain, places: Places) -> Found | Missing:
    """`domain`'s package under `places` with what reading it needs, or what is missing."""
    found = domain.find(places)
    if found is None:
        return Missing(domain)
    if domain.needs is not None and importlib.util.find_spec(domain.needs) is None:
        return Missing(domain, domain.needs)
    return found


def selected(names: list[str] | None, include_gpl: bool) -> list[Domain]:
    """The domains `names` asks for (in `DOMAINS` order), or every permissive one and, with
    `include_gpl`, the GPL ones; raises `AssemblyError` for an unknown name."""
    known = {d.name: d for d in DOMAINS}
    if names is None:
        return [d for d in DOMAINS if include_gpl or not d.gpl]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise AssemblyError(f"--domains: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    return [d for d in DOMAINS if d.name in names]


def held_out(text_sha: bytes, seed: int, val_fraction: float) -> bool:
    """Whether the document whose text hashes to `text_sha` is held out (see the module)."""
    key = hashlib.sha256(seed.to_bytes(8, "little") + text_sha).digest()[:8]
    return int.from_bytes(key, "little") < int(val_fraction * (1 << 64))


def assemble(
    out: Path,
    domains: list[Domain],
    places: Places,
    explicit: bool,
    val_fraction: float = DEFAULT_VAL_FRACTION,
    seed: int = 0,
) -> tuple[dict, list[str]]:
    """Write the corpus of `domains` into `out`; (the manifest, notes on skipped domains).
    A missing package raises `AssemblyError` when the domains were named (`explicit`), else it
    is skipped with a note."""
    if out.exists() and any(out.iterdir()):
        raise AssemblyError(f"{out} exists and is not empty: name a new folder")
    found: dict[str, Found] = {}
    missing: list[Missing] = []
    for domain in domains:
        located = locate(domain, places)
        if isinstance(located, Missing):
            missing.append(located)
        else:
            found[domain.name] = located
    if missing and explicit:
        raise AssemblyError("; ".join(m.line() for m in missing))
    notes = [f"skipped {m.line()}" for m in missing]
    if not found:
        raise AssemblyError("no domain is installed: " + "; ".join(m.line() for m in missing))
    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    seen: set[bytes] = set()
    manifest: dict = {"val_fraction": val_fraction, "seed": seed, "domains": {}}
    try:
        for domain in (d for d in domains if d.name in found):
            manifest["domains"][domain.name] = _write_domain(
                staging / domain.name, domain, found[domain.name], seen, val_fraction, seed
            )
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        if out.exists():
            out.rmdir()  # empty, checked above
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest, notes


def _write_domain(
    folder: Path, domain: Domain, found: Found, seen: set[bytes], val_fraction: float, seed: int
) -> dict:
    folder.mkdir(parents=True)
    digest = hashlib.sha256()
    inputs = []
    read_bytes = 0
    for label, data in read_inputs(found):
        digest.update(label.encode() + b"\0" + data + b"\0")
        read_bytes += len(data)
        inputs.append((label, data))
    counts = {split: {"documents": 0, "bytes": 0} for split in SPLIT_FILES}
    duplicates = empty = 0
    with (
        (folder / SPLIT_FILES["train"]).open("w", encoding="utf-8") as train,
        (folder / SPLIT_FILES["val"]).open("w", encoding="utf-8") as val,
    ):
        for _, text in domain.documents(inputs):
            if not text:
                empty += 1
                continue
            sha = hashlib.sha256(text.encode()).digest()
            if sha in seen:
                duplicates += 1
                continue
            seen.add(sha)
            split = "val" if held_out(sha, seed, val_fraction) else "train"
            (val if split == "val" else train).write(json.dumps({"text": text}) + "\n")
            counts[split]["documents"] += 1
            counts[split]["bytes"] += len(text.encode())
    return {
        "title": domain.title,
        "package": domain.package,
        "registry": domain.registry,
        "version": found.version,
        "licence": domain.licence,
        "gpl": domain.gpl,
        "cleaning": domain.cleaning,
        "read": {"files": len(found.inputs), "bytes": read_bytes, "sha256": digest.hexdigest()},
        "documents": sum(c["documents"] for c in counts.values()),
        "bytes": sum(c["bytes"] for c in counts.values()),
        "duplicates_dropped": duplicates,
        "empty_dropped": empty,
        "splits": counts,
    }


def listing(places: Places) -> list[list[str]]:
    """Rows of `--list`: each domain, its licence and registry, and whether it is installed."""
    rows = []
    for domain in DOMAINS:
        located = locate(domain, places)
        if isinstance(located, Missing):
            what = f"missing {located.module}" if located.module else "missing"
            status = f"{what}: {located.remedy()}"
        else:
            status = f"installed {located.version}"
        kind = "opt-in (GPL)" if domain.gpl else "default"
        rows.append([domain.name, domain.registry, domain.package, domain.licence, kind, status])
    return rows
