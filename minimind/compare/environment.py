"""Where a set of runs trained, read from their provenance tags (`record.environment_tags`): what
a report's environment section states. Each item lists its distinct values with the number of
runs that had each, so a comparison whose arms trained on different CPUs or torch builds says so
(their numbers are then not bit for bit comparable)."""

from __future__ import annotations

import pandas as pd

from minimind.record import ENV_TAG_PREFIX, GIT_COMMIT_TAG, GIT_DIRTY_TAG

UNRECORDED = "not recorded"
"""The value of a run that trained before runs recorded their environment."""


def runs_environment(runs: pd.DataFrame) -> dict[str, str]:
    """{item: 'value (2 runs); other (1 run)'} over a runs table (`mlflow.search_runs`'s, tags
    as `tags.<name>` columns): the commit, whether the tree was dirty, then every `env.<item>`
    (python, torch, numpy, build, cpu, cpu_flags, gpu, ...). A value every run shares is given
    alone; runs without the tag count as `UNRECORDED`. Empty for no runs."""
    if runs.empty:
        return {}
    prefix = f"tags.{ENV_TAG_PREFIX}"
    columns = [f"tags.{GIT_COMMIT_TAG}", f"tags.{GIT_DIRTY_TAG}"]
    columns += sorted(c for c in runs.columns if c.startswith(prefix))
    names = {f"tags.{GIT_COMMIT_TAG}": "git commit", f"tags.{GIT_DIRTY_TAG}": "git tree dirty"}
    return {
        names.get(column, column.removeprefix(prefix)): _values(runs, column) for column in columns
    }


def _values(runs: pd.DataFrame, column: str) -> str:
    values = runs[column] if column in runs.columns else pd.Series([None] * len(runs))
    counts = values.fillna(UNRECORDED).replace("", UNRECORDED).value_counts(sort=True)
    if len(counts) == 1:
        return str(counts.index[0])
    return "; ".join(
        f"{value} ({count} run{'' if count == 1 else 's'})" for value, count in counts.items()
    )
