"""Rendering a `Comparison`: human cells (rich, plain text, markdown, HTML) and machine output
(CSV and JSON with one `<metric>_<stat>` column per statistic)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Literal

import numpy as np
import pandas as pd

from minimind.compare.table import SIZE_PARAMS, SPREAD_METRICS, Comparison
from minimind.foundations.document import Block, Cell, Inline, Paragraph, Strong, Table
from minimind.foundations.document import to_markdown as to_markdown_blocks
from minimind.foundations.document import to_plain as to_plain_blocks
from minimind.spec import PowerHint
from minimind.stats.intervals import Noise, family_alpha, power_comparisons, signal_to_noise
from minimind.stats.power import MAX_SEEDS, seeds_for_difference

MISSING = "-"
PROBLEM_HEADERS = ["run", "variant", "seed", "status", "reason"]


def _nan(x: Any) -> bool:
    return x is None or (isinstance(x, float | np.floating) and math.isnan(x))


def fmt_count(x: float) -> str:
    """1234567 -> '1.23M'."""
    if _nan(x):
        return MISSING
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def fmt_pm(mean: float, std: float, digits: int = 4) -> str:
    """'1.2345 ± 0.0012', or the mean alone when there is no spread (one seed)."""
    if _nan(mean):
        return MISSING
    return f"{mean:.{digits}f}" if _nan(std) else f"{mean:.{digits}f} ± {std:.{digits}f}"


def fmt_seconds(s: float) -> str:
    if _nan(s):
        return MISSING
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def fmt_mem(mb: float) -> str:
    if _nan(mb):
        return MISSING
    return f"{mb / 1024:.1f} GB" if mb >= 10240 else f"{mb:.0f} MB"


def fmt_percent(fraction: float) -> str:
    return MISSING if _nan(fraction) else f"{100 * fraction:.2f}%"


def fmt_delta(row: pd.Series, metric: str, digits: int = 4) -> str:
    """'+0.0123 [-0.0050, +0.0296]'; the baseline row says 'baseline'."""
    value, interval = delta_parts(row, metric, digits)
    return f"{value} {interval}" if interval else value


def delta_parts(row: pd.Series, metric: str, digits: int = 4) -> tuple[str, str]:
    """`fmt_delta` in its two parts, for a table that sets the interval apart: ('+0.0123',
    '[-0.0050, +0.0296]'), or ('baseline', '') and a delta without an interval with ''."""
    delta = row[f"{metric}_delta"]
    if row["is_baseline"]:
        return "baseline", ""
    if _nan(delta):
        return MISSING, ""
    if _nan(row[f"{metric}_delta_low"]):
        return f"{delta:+.{digits}f}", ""
    low, high = row[f"{metric}_delta_low"], row[f"{metric}_delta_high"]
    return f"{delta:+.{digits}f}", f"[{low:+.{digits}f}, {high:+.{digits}f}]"


def fmt_level(level: float) -> str:
    """0.95 -> '95%', 0.983333 -> '98.33%'."""
    return f"{100 * level:.4g}%"


def row_levels(comparison: Comparison) -> list[float]:
    """The distinct levels of the tested rows' intervals, highest first."""
    column = comparison.table.get(f"{comparison.metric}_delta_level", pd.Series(dtype=float))
    tested = comparison.table.get(f"{comparison.metric}_p_adj", pd.Series(dtype=float)).notna()
    return sorted({round(float(v), 12) for v in column[tested]}, reverse=True)


def delta_header(comparison: Comparison) -> str:
    """'Δ val/bpb [95% CI]' at the corrected level, or '[CI at each row's Holm step]' when
    Holm's step-down gives the rows different levels."""
    if len(row_levels(comparison)) > 1:
        return f"Δ {comparison.metric} [CI at each row's Holm step]"
    return f"Δ {comparison.metric} [{fmt_level(comparison.level)} CI]"


def fmt_p(row: pd.Series, metric: str) -> str:
    """'0.0123 (0.0369)': the raw p-value and, in brackets, the corrected one."""
    p, p_adj = row.get(f"{metric}_p", np.nan), row.get(f"{metric}_p_adj", np.nan)
    if _nan(p):
        return MISSING
    return f"{p:.3g}" if _nan(p_adj) or p_adj == p else f"{p:.3g} ({p_adj:.3g})"


def fmt_multiplier(row: pd.Series) -> str:
    """'1.18× [1.09, 1.27]'; '≥ 2.1×' beyond the baseline's curve, '≤ 0.6×' before it, and
    'n/a (bounds both ways)' when some seeds end beyond it and others before it."""
    if row["is_baseline"]:
        return MISSING
    where = row.get("compute_x_where")
    if where == "mixed":
        return "n/a (bounds both ways)"
    bound = row.get("compute_x_bound", np.nan)
    if where == "beyond" and not _nan(bound):
        return f"≥ {bound:.3g}×"
    if where == "before" and not _nan(bound):
        return f"≤ {bound:.3g}×"
    value = row.get("compute_x", np.nan)
    if _nan(value):
        return MISSING
    low, high = row["compute_x_low"], row["compute_x_high"]
    return f"{value:.3g}×" if _nan(low) else f"{value:.3g}× [{low:.3g}, {high:.3g}]"


VerdictKind = Literal["baseline", "better", "worse", "within-noise", "untested"]


def verdict_kind(row: pd.Series, metric: str, maximize: bool) -> VerdictKind:
    """What a row's verdict says, for styling it: the baseline, better, worse, within noise, or
    untested (fewer than 2 seeds, or no test possible)."""
    method = row[f"{metric}_delta_method"]
    if method == "baseline":
        return "baseline"
    if method == "none" or _nan(row[f"{metric}_within_noise"]):
        return "untested"
    if row[f"{metric}_within_noise"]:
        return "within-noise"
    return "better" if (row[f"{metric}_delta"] > 0) == maximize else "worse"


def verdict(row: pd.Series, metric: str, maximize: bool) -> str:
    """'baseline', 'within noise (MDE <smallest detectable difference>)', 'better', 'worse', or
    why no interval could be given."""
    kind = verdict_kind(row, metric, maximize)
    if kind == "untested":
        if row[f"{metric}_delta_method"] != "none":
            return "n/a (no test)"  # e.g. an infinite value: no t-test, no verdict
        return "n/a (<2 seeds)" if not _nan(row[f"{metric}_delta"]) else MISSING
    if kind == "within-noise":
        mde = row.get(f"{metric}_mde", np.nan)
        return "within noise" if _nan(mde) else f"within noise (MDE {mde:.2g})"
    return kind


def split_shared_key(labels: list[str]) -> tuple[str | None, list[str]]:
    """Drop a `key=` prefix that every label shares: (`key`, values), else (None, labels).

    `model.norm=layernorm`, `model.norm=rmsnorm` -> (`model.norm`, [`layernorm`, `rmsnorm`]).
    """
    keys = {label.split("=", 1)[0] for label in labels if "=" in label}
    if len(keys) != 1 or not all("=" in label for label in labels):
        return None, labels
    key = keys.pop()
    if any("," in label for label in labels):  # several axes: the prefix is only the first one
        return None, labels
    return key, [label.split("=", 1)[1] for label in labels]


def group_header(comparison: Comparison) -> str:
    key, _ = split_shared_key(list(comparison.table["variant"]))
    return key or comparison.by


# What a variant costs, beside what it scores: the columns the report shows in a table of their own.
SIZE_HEADERS = ["params", "non-emb", "active", "FLOPs/tok"]
COST_HEADERS = ["compute ×", "tok/s", "peak mem", "MFU", "wall"]


def display_headers(comparison: Comparison) -> list[str]:
    m = comparison.metric
    extra = [] if m in SPREAD_METRICS else [m]
    return [
        group_header(comparison),
        "seeds",
        *SIZE_HEADERS,
        *SPREAD_METRICS,
        *extra,
        f"best {comparison.best_of or m}",
        delta_header(comparison),
        "p (adj)",
        "verdict",
        *COST_HEADERS,
    ]


def seed_count(row: Mapping[str, Any]) -> str:
    """A group's finished runs, with those that failed and those still running: `3 (+1 failed)`."""
    extra = [
        f"+{row[key]} {word}"
        for key, word in (("n_failed", "failed"), ("n_running", "running"))
        if row.get(key)
    ]
    return str(row["n"]) + (f" ({', '.join(extra)})" if extra else "")


def display_rows(comparison: Comparison) -> list[list[Cell]]:
    """The table as cells, one list per group, in `display_headers` order: the delta's interval
    its own part of its cell, the verdict's cell marked for styling."""
    m = comparison.metric
    keys = [*SPREAD_METRICS, *([] if m in SPREAD_METRICS else [m])]
    _, labels = split_shared_key(list(comparison.table["variant"]))
    rows = []
    for label, (_, r) in zip(labels, comparison.table.iterrows(), strict=True):
        seeds = seed_count(r)
        if r["n"] and 0 < r.get("n_seeds", r["n"]) < r["n"]:  # reruns of a seed (A/A)
            seeds += f" ({r['n_seeds']} distinct)"
        pairs = r.get(f"{m}_pairs")
        if not _nan(pairs):
            seeds += f" ({int(pairs)} pairs)"
        texts = [
            label,
            seeds,
            *(fmt_count(r[k]) for k in SIZE_PARAMS),
            *(fmt_pm(r[f"{k}_mean"], r[f"{k}_std"]) for k in keys),
            MISSING if _nan(r[f"{m}_best"]) else f"{r[f'{m}_best']:.4f}",
        ]
        costs = [
            fmt_multiplier(r),
            fmt_count(r["perf/tokens_per_s_median"]),
            fmt_mem(r["sys/peak_mem_mb_max"]),
            fmt_percent(r["perf/mfu_median"]),
            fmt_seconds(r["wall_s_mean"]),
        ]
        rows.append(
            [
                *map(Cell, texts),
                Cell(*delta_parts(r, m)),
                Cell(fmt_p(r, m)),
                Cell(verdict(r, m, comparison.maximize), css="verdict"),
                *map(Cell, costs),
            ]
        )
    return rows


def verdict_kinds(comparison: Comparison) -> list[VerdictKind]:
    """Each row's `verdict_kind`, in `display_rows` order."""
    m = comparison.metric
    return [verdict_kind(r, m, comparison.maximize) for _, r in comparison.table.iterrows()]


def problem_rows(comparison: Comparison) -> list[list[str]]:
    """Failed, killed, unfinished runs and runs without the objective, with their reason."""
    return [
        [
            str(p["run_name"]),
            str(p["group"]),
            MISSING if _nan(p["seed"]) else str(int(p["seed"])),
            str(p["status"]),
            str(p["reason"]),
        ]
        for _, p in comparison.problems.iterrows()
    ]


def caption(comparison: Comparison) -> str:
    """What is compared, how, and how to read the deltas."""
    direction = "higher" if comparison.maximize else "lower"
    methods = sorted(
        set(comparison.table.get(f"{comparison.metric}_delta_method", pd.Series(dtype=str)))
        - {"baseline", "none"}
    )
    how = {
        "welch": "Welch's t",
        "paired": "paired t over the seeds both sides ran",
        "bootstrap": "percentile bootstrap (widened to hold Welch's)",
    }
    levels = row_levels(comparison)
    at = (
        f"a CI at each row's Holm step ({', '.join(fmt_level(v) for v in levels)})"
        if len(levels) > 1
        else f"a {fmt_level(comparison.level)} CI"
    )
    ci = (
        f"with {at} by {' and '.join(how[m] for m in methods)}"
        if methods
        else "(no interval: a side has fewer than 2 seeds)"
    )
    return (
        f"{', '.join(comparison.runset.experiments)}: {comparison.runset.selection}; "
        f"{len(comparison.runs)} runs grouped by {comparison.by}. "
        f"Objective {comparison.metric} ({direction} is better), final value mean ± std over "
        f"seeds{_budget_note(comparison)}{_match_note(comparison)}; {_against(comparison)} {ci}"
        f"{_correction_note(comparison)}"
        f"{_pairing_note(comparison)}.{_best_note(comparison)}{_compute_note(comparison)}"
    )


def _best_note(comparison: Comparison) -> str:
    """What the best column reads: the sampled curve's best, never the exact final value."""
    curve, m = comparison.best_of, comparison.metric
    if not curve or curve == m:
        return f" best {m}: the best of its evaluations during training."
    return (
        f" best {curve}: the best of the periodic estimates on part of the validation split "
        f"(the exact final value is the {m} column)."
    )


def _against(comparison: Comparison) -> str:
    """'Δ vs baseline X' ('Δ vs baseline S' where the label already says it), or, with
    explicit references, against each variant's own."""
    if comparison.references and set(comparison.references.values()) != {comparison.baseline}:
        return "Δ of each variant against its reference"
    name = str(comparison.baseline)
    return f"Δ vs {name}" if name.split(" ", 1)[0] == "baseline" else f"Δ vs baseline {name}"


def _compute_note(comparison: Comparison) -> str:
    table = comparison.table
    if "compute_x" not in table or (
        table["compute_x"].isna().all() and table["compute_x_bound"].isna().all()
    ):
        return ""
    reference = "reference" if comparison.references else "baseline"
    return (
        f" compute ×: the {reference}'s {comparison.compute_unit} to reach the variant's final "
        f"{comparison.metric} on the {reference}'s validation curve, over the variant's "
        "(geometric mean over seeds; ≥ beyond the curve's end, ≤ before its start)."
    )


BUDGETS = (("train.steps", "steps"), ("train.tokens", "tokens"), ("train.time_limit", "s"))


def _budget_note(comparison: Comparison) -> str:
    """The budget the runs shared: '; budget 600 steps', or each budget set when they differ."""
    runs, parts = comparison.runset.runs, []
    for key, unit in BUDGETS:
        values = sorted(
            {str(v) for v in runs.get(f"params.{key}", pd.Series(dtype=object)).dropna()}
        )
        if values:
            parts.append(f"{' or '.join(values)} {unit}")
    if len(parts) > 1:
        return f"; budget {', '.join(parts)}, the first reached ends a run"
    return f"; budget {parts[0]}" if parts else ""


def _match_note(comparison: Comparison) -> str:
    """Which size the variants were matched on (a spec's `match:`), when the runs say."""
    runs = comparison.runset.runs
    by, knob = (
        runs.get(f"params.match.{k}", pd.Series(dtype=object)).dropna() for k in ("by", "knob")
    )
    if by.empty:
        return ""
    return f"; variants matched on {by.iloc[0]} by resizing {knob.iloc[0] if len(knob) else '?'}"


def _correction_note(comparison: Comparison) -> str:
    """How the family of comparisons was corrected, and for how many."""
    n = comparison.n_comparisons
    if n <= 1:
        return f" ({n} comparison, nothing to correct)" if n else ""
    if comparison.correction == "none":
        return f" (uncorrected over {n} comparisons: the chance of a false call grows with n)"
    if comparison.correction == "bonferroni":
        return f"; p-values Bonferroni-corrected for {n} comparisons, intervals at 1 - 0.05/{n}"
    return (
        f"; p-values Holm-corrected for {n} comparisons, each interval at its Holm step's level "
        "(it excludes 0 exactly when the corrected p < 0.05)"
    )


def _pairing_note(comparison: Comparison) -> str:
    """Why comparisons fell back from the paired interval, when some did."""
    notes = comparison.table.get(f"{comparison.metric}_delta_note", pd.Series(dtype=str))
    reasons = sorted(
        {n for n in notes if isinstance(n, str) and n and n != "unpaired: --paired off"}
    )
    left_out = [n for n in reasons if n.startswith("paired on")]  # `stats.intervals._pairs`
    unpaired = [n for n in reasons if n not in left_out]
    return "".join(f"; {n}" for n in left_out) + (
        f"; {'; '.join(unpaired)} (Welch's t instead)" if unpaired else ""
    )


def noise_lines(comparison: Comparison, show_noise: bool = True) -> list[str]:
    """The seed-to-seed noise (with `show_noise`) and the seeds `--power` asks for."""
    m, lines = comparison.metric, []
    noise, paired = comparison.noise, comparison.paired_noise
    if show_noise and noise is not None:
        if noise.df == 0:
            lines.append(f"Seed-to-seed sd of {m}: unknown (no group has 2 seeds).")
        else:
            level = fmt_level(noise.level)
            lines.append(
                f"Seed-to-seed sd of {m}: {noise.sd:.3g} ({level} CI {noise.low:.3g} to "
                f"{noise.high:.3g}; pooled within groups, {noise.df} df; a seed's reruns "
                "averaged into one value)."
            )
            snr = signal_to_noise(comparison.table[f"{m}_mean"].to_numpy(), noise.sd)
            if not _nan(snr):
                lines.append(
                    f"Signal-to-noise of {m}: {snr:.3g} (spread of the group means over the "
                    "seed-to-seed sd; Heineman et al. 2025)."
                )
        if paired is not None and paired.df > 0:
            lines.append(
                f"Sd of the per-seed differences of the paired comparisons: {paired.sd:.3g} "
                f"({fmt_level(paired.level)} CI {paired.low:.3g} to {paired.high:.3g}; "
                f"{paired.df} df)."
            )
    if comparison.power_delta is not None:
        if comparison.power_seeds is None:
            lines.append(
                "Power: unknown, the noise could not be measured (2 seeds a group needed)."
            )
        else:
            arms = ", ".join(f"{_seeds(n)} {how}" for how, n in comparison.power_seeds.items())
            lines.append(
                f"Power: to detect Δ {m} = {comparison.power_delta:g} with 80% power at alpha "
                f"{comparison.power_alpha:.3g} ({comparison.correction} over "
                f"{comparison.power_comparisons} comparison(s)) needs seeds per arm: {arms}."
            )
    return lines


def power_hint(hint: PowerHint, n_variants: int, n_seeds: int) -> str:
    """The `--dry-run` line of a spec's `power:` hint: the seeds per arm that detect
    `hint.delta` with 80% power when seeds vary by `hint.sd`, corrected for every variant
    against the first."""
    n_tests = max(1, n_variants - 1)
    k = power_comparisons(n_tests, hint.correction)
    alpha = family_alpha(k, hint.correction)
    unpaired = seeds_for_difference(hint.delta, hint.sd, design="unpaired", comparisons=k)
    enough = "enough" if unpaired is not None and n_seeds >= unpaired else "too few"
    return (
        f"power: to detect a difference of {hint.delta:g} (seed-to-seed sd {hint.sd:g}) with "
        f"80% power at alpha {alpha:.3g} ({hint.correction} over {n_tests} comparison(s)) "
        f"takes {_seeds(unpaired)} seeds per arm unpaired (a paired design needs fewer when "
        f"the seeds' shared noise cancels); the spec runs {n_seeds}: {enough}."
    )


def _seeds(n: int | None) -> str:
    return f"more than {MAX_SEEDS:,}" if n is None else str(n)


def score_tables(comparison: Comparison, split: bool = False) -> list[Table]:
    """The table, one row per group, each row classed by its verdict's kind. With `split`, two
    tables, the group column in both: what the groups score (seeds, metrics, delta, verdict),
    then what they cost (size, compute multiplier, speed, memory, wall). As one table it is
    1,600 px wide, and a 1,400 px window showed its cost only after scrolling sideways."""
    headers, rows = display_headers(comparison), display_rows(comparison)
    kinds = verdict_kinds(comparison)
    if not split:
        return [Table(headers, rows, "comparison", kinds)]
    cost = set(SIZE_HEADERS + COST_HEADERS)
    scored = [i for i, h in enumerate(headers) if h not in cost]
    costs = [0, *(i for i, h in enumerate(headers) if h in cost)]

    def columns(at: list[int]) -> tuple[list[str], list[list[Cell]]]:
        return [headers[i] for i in at], [[row[i] for i in at] for row in rows]

    return [Table(*columns(scored), "comparison", kinds), Table(*columns(costs), "comparison cost")]


def comparison_blocks(
    comparison: Comparison, show_noise: bool = False, split: bool = False
) -> list[Block]:
    """What was compared and how (the caption), the table (`score_tables`), and the noise and
    power lines."""
    lines = noise_lines(comparison, show_noise)
    return [
        Paragraph(caption(comparison), "caption"),
        *score_tables(comparison, split),
        *(Paragraph(line, "caption") for line in lines),
    ]


def problem_table(comparison: Comparison) -> Table:
    return Table(PROBLEM_HEADERS, problem_rows(comparison), "problems")


def problem_blocks(comparison: Comparison) -> list[Block]:
    """The failed and unfinished runs under a title, or nothing when every run finished."""
    if not len(comparison.problems):
        return []
    title: list[Inline] = [Strong("Failed or incomplete runs"), " (not in the statistics):"]
    return [Paragraph(title), problem_table(comparison)]


def to_plain(comparison: Comparison, show_noise: bool = False) -> str:
    blocks = [*comparison_blocks(comparison, show_noise), *problem_blocks(comparison)]
    return to_plain_blocks(blocks) + "\n"


def to_markdown(comparison: Comparison, show_noise: bool = False) -> str:
    blocks = [*comparison_blocks(comparison, show_noise), *problem_blocks(comparison)]
    return to_markdown_blocks(blocks) + "\n"


def print_rich(comparison: Comparison, show_noise: bool = False) -> None:
    """Print to the terminal with rich: the table never truncates a number; a table wider than
    the terminal is printed at its natural width (the terminal wraps it) rather than squeezed."""
    from rich import box
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    styles = {"better": "green", "worse": "red", "within-noise": "dim", "baseline": "bold"}
    table = Table(box=box.SIMPLE_HEAVY, padding=(0, 1))
    headers = display_headers(comparison)
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i == 0 or h == "verdict" else "right", no_wrap=True)
    verdict_at = headers.index("verdict")
    for row, kind in zip(display_rows(comparison), verdict_kinds(comparison), strict=True):
        table.add_row(
            *(
                Text(str(c), style=styles.get(kind, "")) if i == verdict_at else str(c)
                for i, c in enumerate(row)
            )
        )
    console = Console()
    width = Measurement.get(console, console.options.update(max_width=10_000), table).maximum
    if width > console.width:  # Console.print clamps its width to the console's
        console = Console(width=width)
    console.print(Text(caption(comparison), style="italic"))
    console.print(table)
    for line in noise_lines(comparison, show_noise):
        console.print(line)
    if len(comparison.problems):
        failed = Table(
            box=box.SIMPLE_HEAVY,
            title="Failed or incomplete runs (not in the statistics)",
            title_style="red",
        )
        for h in PROBLEM_HEADERS:
            failed.add_column(h)
        for problem in problem_rows(comparison):
            failed.add_row(*problem)
        console.print(failed)


def _jsonable(value: Any) -> Any:
    if _nan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return value


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _jsonable(v) for k, v in row.items()} for row in df.to_dict("records")]


def to_csv(comparison: Comparison) -> str:
    """The aggregated table, one `<metric>_<stat>` column per statistic."""
    return comparison.table.to_csv(index=False)


def _noise_record(noise: Noise | None) -> dict[str, Any] | None:
    return None if noise is None else {k: _jsonable(v) for k, v in asdict(noise).items()}


def to_json(comparison: Comparison) -> str:
    """The table as `rows` (one `<metric>_<stat>` key per statistic), plus what was compared
    and the failed runs."""
    problems = comparison.problems[["run_id", "run_name", "group", "seed", "status", "reason"]]
    document = {
        "experiments": comparison.runset.experiments,
        "selection": comparison.runset.selection,
        "metric": comparison.metric,
        "direction": "maximize" if comparison.maximize else "minimize",
        "by": comparison.by,
        "baseline": comparison.baseline,
        "correction": comparison.correction,
        "n_comparisons": comparison.n_comparisons,
        "level": comparison.level,
        "noise": _noise_record(comparison.noise),
        "paired_noise": _noise_record(comparison.paired_noise),
        "power": None
        if comparison.power_delta is None
        else {
            "delta": comparison.power_delta,
            "alpha": comparison.power_alpha,
            "seeds_per_arm": comparison.power_seeds,
        },
        "rows": _records(comparison.table),
        "failed_runs": _records(problems),
    }
    return json.dumps(document, indent=2)


def runs_csv(comparison: Comparison) -> str:
    """One row per run (finished or not), for runs.csv in the report."""
    return comparison.runs.to_csv(index=False)
