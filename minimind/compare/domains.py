"""Per-domain comparisons over a held-out suite (`data.eval_sets`): each arm's Δ on every
`val/<name>/bpb` against the baseline, the domains of a comparison one corrected family, and
each metric's signal-to-noise ratio (Heineman et al. 2025; docs/statistics.md).

    suite = domain_suite(runset, options)       # None when the runs log no suite
    print(domain_lines(suite.table, suite.snr)) # the plain-text section
    fig = domain_figure(suite.table)            # the figure: Δ by domain, one marker per arm
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from minimind.compare.runs import CompareError, RunSet
from minimind.compare.table import (
    CompareOptions,
    resolve_group_key,
    split_problems,
    summarize_runs,
)
from minimind.foundations.plain_table import plain_table
from minimind.record import EVAL_SET_METRIC
from minimind.stats.intervals import (
    Sample,
    compare_family,
    pooled_noise,
    seed_values,
    signal_to_noise,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MACRO = "val/bpb_macro"


def suite_metrics(runset: RunSet) -> list[str]:
    """The exact per-domain metrics the runs logged, `val/<name>/bpb`, in name order."""
    logged = (c.removeprefix("metrics.") for c in runset.runs.columns if c.startswith("metrics."))
    return sorted(
        m for m in logged if EVAL_SET_METRIC.fullmatch(m) and m.endswith("/bpb") and m != MACRO
    )


def domain_of(metric: str) -> str:
    """`val/<name>/bpb` -> `<name>`."""
    return metric.split("/")[1]


@dataclass(frozen=True)
class _Groups:
    samples: dict[str, Sample]  # group -> its runs' final values and seeds
    order: list[str]  # groups by their first run


def _groups(runset: RunSet, metric: str, group_column: str) -> _Groups:
    finished, _ = split_problems(summarize_runs(runset, metric, group_column), metric)
    order = list(dict.fromkeys(finished.sort_values("start_time")["group"]))
    samples = {
        g: Sample.of(runs[metric], runs["seed"])
        for g, runs in ((g, finished[finished["group"] == g]) for g in order)
    }
    return _Groups(samples, order)


def suite_signal_to_noise(
    runset: RunSet, by: str | None = None, metrics: list[str] | None = None
) -> dict[str, tuple[float, float]]:
    """Per metric (the suite's `val/<name>/bpb`, `val/bpb_macro` and `val/bpb` where logged, or
    `metrics`): (signal-to-noise ratio, pooled seed-to-seed sd). The signal is the spread of
    the arms' means, the noise the sd over seeds within arms (`stats.signal_to_noise`)."""
    group_column = resolve_group_key(runset.runs, by)
    logged = {c.removeprefix("metrics.") for c in runset.runs.columns if c.startswith("metrics.")}
    if metrics is None:
        metrics = [*suite_metrics(runset), *(m for m in (MACRO, "val/bpb") if m in logged)]
    out = {}
    for metric in metrics:
        groups = _groups(runset, metric, group_column)
        noise = pooled_noise([seed_values(s) for s in groups.samples.values()])
        means = np.array([np.mean(seed_values(s)) for s in groups.samples.values()])
        out[metric] = (signal_to_noise(means, noise.sd), noise.sd)
    return out


def domain_table(runset: RunSet, options: CompareOptions) -> pd.DataFrame:
    """One row per (domain, arm other than the baseline): `domain`, `variant`, `baseline`,
    `delta` (arm minus baseline in bits per byte), `low`, `high` (the interval at `level`),
    `p`, `p_adj`, `method`, `seeds`. Every domain's comparisons with the baseline form one
    family, corrected together (`stats.compare_family`: Holm's step-down levels by default).
    `options` gives the grouping, baseline, interval, correction and pairing (its `metric` is
    not used: every domain is one). Raises `CompareError` when the runs log no suite."""
    by, baseline = options.by, options.baseline
    metrics = suite_metrics(runset)
    if not metrics:
        raise CompareError("the runs log no held-out suite (data.eval_sets: val/<name>/bpb)")
    group_column = resolve_group_key(runset.runs, by)
    per_metric = {m: _groups(runset, m, group_column) for m in metrics}
    order = per_metric[metrics[0]].order
    reference = baseline if baseline is not None else (order[0] if order else None)
    if reference is None or reference not in order:
        raise CompareError(f"unknown --baseline {baseline!r}; variants: {', '.join(order)}")
    variants: dict[str, Sample] = {}
    against: dict[str, Sample] = {}
    keys: dict[str, tuple[str, str]] = {}
    for metric, groups in per_metric.items():
        if reference not in groups.samples:
            continue
        for group, sample in groups.samples.items():
            if group == reference:
                continue
            key = f"{domain_of(metric)}\t{group}"
            variants[key], against[key] = sample, groups.samples[reference]
            keys[key] = (domain_of(metric), group)
    family = compare_family(
        variants,
        against,
        method=options.ci,
        correction=options.correction,
        pairing=options.paired,
    )
    rows = [
        {
            "domain": keys[key][0],
            "variant": keys[key][1],
            "baseline": reference,
            "delta": c.delta,
            "low": c.low,
            "high": c.high,
            "level": c.level,
            "p": c.p,
            "p_adj": c.p_adj,
            "method": c.method,
            "seeds": len(seed_values(variants[key])),
        }
        for key, c in family.items()
    ]
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class DomainSuite:
    """The held-out suite's comparison: `table` from `domain_table`, `snr` from
    `suite_signal_to_noise`."""

    table: pd.DataFrame
    snr: dict[str, tuple[float, float]]


def domain_suite(runset: RunSet, options: CompareOptions) -> DomainSuite | None:
    """The per-domain comparison of `runset`, or None when the runs log no suite."""
    if not suite_metrics(runset):
        return None
    return DomainSuite(domain_table(runset, options), suite_signal_to_noise(runset, options.by))


DOMAIN_HEADERS = ["domain", "variant", "Δ bpb", "interval", "p (corrected)", "SNR"]


def domain_rows(table: pd.DataFrame, snr: dict[str, tuple[float, float]]) -> list[list[str]]:
    """The cells of the per-domain table under `DOMAIN_HEADERS`: Δ with its interval and
    corrected p per domain and arm, and each domain's signal-to-noise ratio."""

    def num(x: float, fmt: str = ".4f") -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)

    return [
        [
            r.domain,
            r.variant,
            num(r.delta, "+.4f"),
            f"[{num(r.low, '+.4f')}, {num(r.high, '+.4f')}]",
            num(r.p_adj, ".3g"),
            num(snr.get(f"val/{r.domain}/bpb", (math.nan, math.nan))[0], ".3g"),
        ]
        for r in table.itertuples()
    ]


def domain_note(table: pd.DataFrame) -> str:
    """What the per-domain table's intervals and p are: the baseline, the levels, the family."""
    levels = sorted({f"{lvl:.4g}" for lvl in table["level"] if not math.isnan(lvl)})
    return (
        f"Δ against {table['baseline'].iloc[0] if len(table) else '-'}; the domains are one "
        f"family (intervals at levels {', '.join(levels) or '-'}; Holm's step-down)."
    )


def domain_lines(table: pd.DataFrame, snr: dict[str, tuple[float, float]]) -> str:
    """The per-domain section as plain text (`domain_rows` and `domain_note`)."""
    return plain_table(DOMAIN_HEADERS, domain_rows(table, snr)) + "\n" + domain_note(table) + "\n"


def domain_figure(table: pd.DataFrame) -> Figure:
    """The figure of Δ by domain: each arm's Δ with its interval, domains on the x axis (the
    caller saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains = list(dict.fromkeys(table["domain"]))
    arms = list(dict.fromkeys(table["variant"]))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(domains)), 3.2))
    for k, arm in enumerate(arms):
        rows = table[table["variant"] == arm].set_index("domain").reindex(domains)
        x = np.arange(len(domains)) + (k - (len(arms) - 1) / 2) * 0.15
        errors = np.vstack([rows["delta"] - rows["low"], rows["high"] - rows["delta"]])
        ax.errorbar(x, rows["delta"], yerr=np.nan_to_num(errors), fmt="o", capsize=3, label=arm)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xticks(np.arange(len(domains)), domains, rotation=30, ha="right")
    ax.set_ylabel("Δ bits per byte")
    ax.set_title(f"against {table['baseline'].iloc[0]}", fontsize="small")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
