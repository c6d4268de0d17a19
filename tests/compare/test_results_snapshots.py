"""The committed reports under results/ are snapshots: results/README.md names the commit each
was rendered by."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "results"
REPORT_FILES = ("index.html", "report.md", "summary.md")


def test_every_committed_report_folder_names_the_commit_it_is_a_snapshot_of() -> None:
    rows = {
        match.group(1): match.group(2)
        for match in re.finditer(
            r"^\| `([^`]+/)`[^|]* \| `([0-9a-f]{7,40})`", (RESULTS / "README.md").read_text(), re.M
        )
    }
    folders = {
        f"{path.parent.relative_to(RESULTS).as_posix()}/"
        for name in REPORT_FILES
        for path in RESULTS.glob(f"*/**/{name}")
        if "generated" not in path.parts
    }
    # A rung's report inside a ladder's folder is part of the ladder's snapshot.
    tops = {f for f in folders if not any(f != g and f.startswith(g) for g in folders)}
    assert tops and tops <= set(rows), sorted(tops - set(rows))
