"""Where a set of runs trained, read from their provenance tags (`record.environment_tags`): what
a report's environment section states. Each item lists its distinct values with the number of
runs that had each, so a comparison whose arms trained on different CPUs or torch builds says so
(their numbers are then not bit for bit comparable)."""

from __future__ import annotations

import pandas as pd

from minimind.foundations.document import Block, Fields, Heading, Paragraph
from minimind.record import ENV_TAG_PREFIX, GIT_COMMIT_TAG, GIT_DIFF_ARTIFACT, GIT_DIRTY_TAG

UNRECORDED = "not recorded"
"""The value of a run that trained before runs recorded their environment."""


def environment_counts(runs: pd.DataFrame) -> dict[str, pd.Series]:
    """{item: the runs per distinct value, most first} over a runs table (`mlflow.search_runs`'s,
    tags as `tags.<name>` columns): the commit, whether the tree was dirty, then every
    `env.<item>` (python, torch, numpy, build, cpu, cpu_flags, gpu, ...); runs without the tag
    count as `UNRECORDED`. Empty for no runs."""
    if runs.empty:
        return {}
    prefix = f"tags.{ENV_TAG_PREFIX}"
    columns = [f"tags.{GIT_COMMIT_TAG}", f"tags.{GIT_DIRTY_TAG}"]
    columns += sorted(c for c in runs.columns if c.startswith(prefix))
    names = {f"tags.{GIT_COMMIT_TAG}": "git commit", f"tags.{GIT_DIRTY_TAG}": "git tree dirty"}
    return {
        names.get(column, column.removeprefix(prefix)): _counts(runs, column) for column in columns
    }


def runs_environment(runs: pd.DataFrame) -> dict[str, str]:
    """{item: 'value (2 runs); other (1 run)'} (`environment_counts`): a value every run
    shares is given alone."""
    return _described(environment_counts(runs))


def _described(counts: dict[str, pd.Series]) -> dict[str, str]:
    return {item: _describe(c) for item, c in counts.items()}


def _counts(runs: pd.DataFrame, column: str) -> pd.Series:
    values = runs[column] if column in runs.columns else pd.Series([None] * len(runs))
    return values.fillna(UNRECORDED).replace("", UNRECORDED).astype(str).value_counts(sort=True)


def _describe(counts: pd.Series) -> str:
    if len(counts) == 1:
        return str(counts.index[0])
    return "; ".join(
        f"{value} ({count} run{'' if count == 1 else 's'})" for value, count in counts.items()
    )


def environment_blocks(runs: pd.DataFrame) -> list[Block]:
    """The report's section "Environment": each item of `runs_environment`, and which items
    the runs differ in (then their numbers are not bit for bit comparable); nothing when no
    run recorded any of it."""
    counts = environment_counts(runs)
    if all(list(c.index) == [UNRECORDED] for c in counts.values()):
        return []
    differ = [item for item, c in counts.items() if len(c) > 1]
    unrecorded = [item for item, c in counts.items() if list(c.index) == [UNRECORDED]]
    dirty = int(counts.get("git tree dirty", pd.Series(dtype=int)).get("true", 0))
    if differ:
        notes = [
            f"The runs differ in {', '.join(differ)}: their numbers are not bit for bit "
            "comparable (a run repeats bit for bit only on the same CPU family and torch "
            "build, from the same code)."
        ]
    else:
        notes = [
            "The runs agree on every item recorded (a run repeats bit for bit on the same CPU "
            "family and torch build, from the same code)."
        ]
    if unrecorded:
        notes.append(f"No run recorded {', '.join(unrecorded)} (trained before runs did).")
    if dirty:
        notes.append(
            f"{dirty} run{' was' if dirty == 1 else 's were'} trained from a tree with "
            f"uncommitted changes (the diff is the run's artifact {GIT_DIFF_ARTIFACT})."
        )
    return [Heading(2, "Environment"), Fields(_described(counts)), Paragraph(" ".join(notes))]
