"""Comparing runs from MLflow: which variant differences are real and which are seed noise.

`load_runs` selects the runs (histories are fetched when needed), `compare` aggregates them into a
`Comparison` (what it is asked: `CompareOptions`), `render` formats it, `plots` draws the figures
and `report` writes the report.
"""

from __future__ import annotations

import sys

from minimind.compare.runs import CompareError, RunSet, load_runs
from minimind.compare.table import CompareOptions, Comparison, compare

__all__ = [
    "CompareError",
    "CompareOptions",
    "Comparison",
    "RunSet",
    "compare",
    "load_runs",
    "print_comparison",
]


def print_comparison(tracking_uri: str, experiment: str, parent_run_id: str | None = None) -> None:
    """Print the comparison table of one `minimind run` invocation (its parent run's children).

    With `parent_run_id=None`, the latest invocation in `experiment`. Rich in a terminal, plain
    text otherwise. A comparison that cannot be made is explained on stderr, never raised, so
    that a finished training run does not end in a traceback.
    """
    from minimind.compare import render
    from minimind.compare.ladder import is_ladder

    try:
        runset = load_runs(tracking_uri, [experiment], parent_run_id=parent_run_id)
        if runset.runs.empty:
            print(f"No runs to compare in {experiment} ({runset.selection}).", file=sys.stderr)
            return
        if is_ladder(runset):
            from minimind.compare import ladder_render
            from minimind.compare.ladder import compare_ladder

            sys.stdout.write(ladder_render.to_plain(compare_ladder(runset)))
            return
        comparison = compare(runset)
    except CompareError as e:
        print(f"compare: {e}", file=sys.stderr)
        return
    if sys.stdout.isatty():
        render.print_rich(comparison)
    else:
        sys.stdout.write(render.to_plain(comparison))
