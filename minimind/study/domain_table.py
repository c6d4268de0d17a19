"""An axis's held-out suite domain by domain: each arm's Δ against the axis's reference on every
`val/<name>/bpb` its runs logged, and which of those domains the runs never trained on (out of
distribution), beside the objective that decides the rows (their macro mean).

The intervals are `compare.domains.domain_table`'s: the axis's domains and arms one family,
Holm-corrected, paired by seed where the arms share seeds. They say where a difference lies; a
row's verdict rests on the macro alone.
"""

from __future__ import annotations

import pandas as pd

from minimind.compare.domains import domain_table, suite_metrics
from minimind.compare.table import CompareOptions
from minimind.foundations.document import Cell
from minimind.study.analysis import AxisResult

IDENTITY_KEYS = ("source", "corpus", "dataset")
"""What names where a source's or an eval set's text comes from: a training source's own name
(`data.eval_sets.<name>.source`), a corpus folder or a dataset."""

NOTE = (
    "Δ bits per byte on each held-out domain, arm − reference, with its interval: the axis's "
    "domains and arms one family (Holm), paired by seed where the arms share seeds. 'no' under "
    "trained on: a domain no training source draws from (out of distribution); the others are "
    "held-out documents of a training source. The rows' verdicts rest on the objective alone "
    "(the macro mean over the domains); this table says where a difference lies."
)


def out_of_distribution(runs: pd.DataFrame) -> set[str]:
    """The eval sets of `runs` (`data.eval_sets.<name>.*` params) drawn from no source they
    trained on: one without `source:` (held-out documents of a training source) whose corpus or
    dataset no training source (`data.sources.<name>.*`) names."""
    first = runs.iloc[0]

    def identities(prefix: str) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for column, value in first.items():
            name, _, key = str(column).removeprefix(prefix).partition(".")
            if str(column).startswith(prefix) and pd.notna(value):
                found.setdefault(name, set())
                if key in IDENTITY_KEYS:
                    found[name].add(f"{key}={value}")
        return found

    trained = set().union(*identities("params.data.sources.").values())
    return {
        name
        for name, where in identities("params.data.eval_sets.").items()
        if not any(w.startswith("source=") for w in where) and not where & trained
    }


def axis_domain_rows(result: AxisResult) -> tuple[list[str], list[list[Cell]]]:
    """The per-domain table of an axis whose comparisons share one reference: headers (domain,
    trained on, then each arm's label) and a row per domain, those trained on first; empty
    rows when its runs log no suite or its comparisons have several references."""
    runset = result.comparison.runset
    references = {f.against for f in result.findings}
    if not suite_metrics(runset) or len(references) != 1:
        return [], []
    (reference,) = references
    axis = result.comparison
    options = CompareOptions(
        metric=axis.metric, by=axis.by, baseline=reference, correction=axis.correction
    )
    table = domain_table(runset, options)
    arms = [f.arm for f in result.findings if f.arm in set(table["variant"])]
    unseen = out_of_distribution(runset.runs)
    domains = sorted(dict.fromkeys(table["domain"]), key=lambda d: (d in unseen, d))
    cells = table.set_index(["domain", "variant"])
    rows = [
        [Cell(domain), Cell("no" if domain in unseen else "yes")]
        + [_delta(cells.loc[(domain, arm)]) for arm in arms]
        for domain in domains
    ]
    return ["domain", "trained on", *(f"{arm} − {reference}" for arm in arms)], rows


def _delta(row: pd.Series) -> Cell:
    return Cell(f"{row['delta']:+.4f}", f"[{row['low']:+.4f}, {row['high']:+.4f}]")
