"""A ladder's comparison (`compare.ladder.Ladder`) as text, markdown, CSV and JSON: each rung's
usual comparison table, then the ladder section (the arms' fits, each comparison's exponent
difference, extrapolated multiplier, trend and crossing, and its decision at every rung beside
the single-scale ranking)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import pandas as pd

from minimind.compare import render
from minimind.compare.ladder import Ladder, LadderResult, Rung
from minimind.foundations.document import Block, Heading, Paragraph, Table, Text
from minimind.foundations.document import to_markdown as to_markdown_blocks
from minimind.foundations.document import to_plain as to_plain_blocks
from minimind.stats.scaling import COVERAGE_TOLERANCE, Estimate


def fmt_estimate(estimate: Estimate, digits: int = 3, signed: bool = False) -> str:
    """'0.31 [0.12, 0.50]', or the value alone without an interval."""
    sign = "+" if signed else ""
    value = f"{estimate.value:{sign}.{digits}g}"
    if math.isnan(estimate.low):
        return value
    return f"{value} [{estimate.low:{sign}.{digits}g}, {estimate.high:{sign}.{digits}g}]"


def fmt_compute(compute: float, unit: str) -> str:
    return f"{compute:.3g} {unit}"


def decision(row: pd.Series, maximize: bool) -> str:
    """What one rung alone decides: better, worse or within noise (at the corrected level)."""
    if pd.isna(row["delta"]):
        return render.MISSING
    if row["within_noise"] is None or row["within_noise"]:
        return "within noise"
    return "better" if (row["delta"] > 0) == maximize else "worse"


def _span(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}–{high}"


def arm_rows(ladder: Ladder) -> tuple[list[str], list[list[str]]]:
    """Each arm's fitted law with its intervals over seeds, and the points and degrees of
    freedom behind them: each seed's law has 3 parameters on its points, and each interval is
    a t interval over the seeds."""
    headers = ["arm", "seeds fitted (t dof)", "points per seed (fit dof)", "exponent α", "irreducible E", "scale A (geometric mean)"]  # fmt: skip
    rows = []
    for arm, fitted in ladder.arms.items():
        if fitted.fit is None:
            rows.append([arm, "0", "", f"no fit: {fitted.problem}", "", ""])
            continue
        fit = fitted.fit
        counts = [len(compute) for compute, _ in fit.points.values()]
        low, high = min(counts), max(counts)
        rows.append(
            [
                arm + (" (baseline)" if arm == ladder.baseline else ""),
                f"{len(fit.per_seed)} ({len(fit.per_seed) - 1})",
                f"{_span(low, high)} ({_span(low - 3, high - 3)})",
                fmt_estimate(fit.exponent),
                fmt_estimate(fit.irreducible, 4),
                fmt_estimate(fit.scale),
            ]
        )
    return headers, rows


def result_rows(ladder: Ladder) -> tuple[list[str], list[list[str]]]:
    """Each comparison across the ladder."""
    at = f"× at {ladder.extrapolate_factor:g}× the top rung"
    headers = ["comparison", "Δ exponent", at, "trend of Δ with compute (slope/decade)", "p", "trend", "crossing"]  # fmt: skip
    rows = []
    for result in ladder.results:
        label = f"{result.arm} vs {ladder.baseline}"
        if result.result is None:
            rows.append([label, f"n/a: {result.problem}", "", "", "", "", ""])
            continue
        r = result.result
        if not r.extrapolation_supported:
            multiplier = extrapolation_withheld(r.extrapolation_coverage, ladder.level)
        elif r.where == "beyond":
            multiplier = "unbounded (below the baseline's irreducible loss)"
        else:
            multiplier = fmt_estimate(r.extrapolated_multiplier)
        # The slope is fitted against natural-log compute; per decade reads more easily.
        per_decade = Estimate(
            r.trend_slope.value * math.log(10),
            r.trend_slope.low * math.log(10),
            r.trend_slope.high * math.log(10),
            r.trend_slope.n,
        )
        # A slope needs readings at two rungs or more; a test, two seeds with one.
        tested = r.trend_slope.n >= 2
        rows.append(
            [
                label,
                fmt_estimate(r.exponent_difference, signed=True),
                f"{multiplier} (at {fmt_compute(r.extrapolated_to, ladder.compute_unit)}"
                + (
                    f"; simulated coverage {r.extrapolation_coverage:.0%})"
                    if r.extrapolation_supported
                    else ")"
                ),
                f"{fmt_estimate(per_decade, signed=True)} in {ladder.metric}; "
                f"{_trend_design(r.trend_points, r.trend_slope.n)}"
                if r.trend_slope.n
                else "no seed ran both arms at 2 points",
                render.MISSING
                if math.isnan(r.trend_p)
                else f"{r.trend_p:.3g} (Holm {r.trend_p_adj:.3g})",
                r.trend if tested else "not tested",
                "none"
                if r.crossing is None
                else f"at {fmt_compute(r.crossing, ladder.compute_unit)}",
            ]
        )
    return headers, rows


def _trend_design(points: tuple[int, int], seeds: int) -> str:
    """'3 seeds (t dof 2), slopes on 12 points (dof 10)'."""
    low, high = points
    return (
        f"{seeds} seeds (t dof {seeds - 1}), slopes on {_span(low, high)} points "
        f"(dof {_span(low - 2, high - 2)})"
    )


def extrapolation_withheld(coverage: float, level: float) -> str:
    """Why a ladder's extrapolated multiplier is not reported (`LadderComparison`)."""
    if math.isnan(coverage):
        return "not reported: its coverage cannot be simulated (fewer than 2 seeds ran every rung of both arms)"  # fmt: skip
    return (
        f"not reported: this ladder cannot support an extrapolation to that compute (its "
        f"{level:.0%} interval held the truth in {coverage:.0%} of ladders simulated at its "
        f"rungs and noise; {level - COVERAGE_TOLERANCE:.0%} needed)"
    )


def rung_rows(ladder: Ladder, result: LadderResult) -> tuple[list[str], list[list[str]]]:
    """One comparison at each point: its delta, decision and multiplier, and the arms' ranks."""
    headers = ["point", "params", "tokens / param", "compute", "Δ [CI]", "p (adj)", "decision at this point", "compute ×", "agrees with the top point", "rank (arm / baseline)"]  # fmt: skip
    rows = []
    for _, row in result.rungs.iterrows():
        rung = next(r for r in ladder.rungs if r.name == row["rung"])
        ranks = ladder.ranking.loc[rung.name] if rung.name in ladder.ranking.index else None
        rank = (
            render.MISSING
            if ranks is None
            else f"{_rank(ranks.get(result.arm))} / {_rank(ranks.get(ladder.baseline))}"
        )
        agrees = row.get("agrees_with_top")
        rows.append(
            [
                rung.name,
                render.fmt_count(rung.params),
                render.MISSING
                if math.isnan(rung.tokens_per_param)
                else f"{rung.tokens_per_param:.3g}",
                fmt_compute(rung.compute, ladder.compute_unit),
                _delta(row),
                render.MISSING if pd.isna(row["p_adj"]) else f"{row['p_adj']:.3g}",
                decision(row, ladder.maximize),
                render.fmt_multiplier(pd.Series({**row.to_dict(), "is_baseline": False})),
                render.MISSING if agrees is None else ("yes" if agrees else "no"),
                rank,
            ]
        )
    return headers, rows


def _rank(value: Any) -> str:
    return render.MISSING if value is None or pd.isna(value) else str(int(value))


def _delta(row: pd.Series) -> str:
    if pd.isna(row["delta"]):
        return render.MISSING
    if pd.isna(row["delta_low"]):
        return f"{row['delta']:+.4f}"
    return f"{row['delta']:+.4f} [{row['delta_low']:+.4f}, {row['delta_high']:+.4f}]"


def ladder_caption(ladder: Ladder) -> str:
    sizes = {r.rung: r.params for r in ladder.rungs}
    rungs = ", ".join(f"{name} ({render.fmt_count(n)} params)" for name, n in sizes.items())
    branched = [r for r in ladder.rungs if r.budget is not None]
    points = (
        f" at {len(ladder.rungs)} (rung, budget) points (budget branches: a rung's shorter "
        "budgets decay from its longest run's stable phase)"
        if branched
        else ""
    )
    return (
        f"Ladder of {len(sizes)} rungs: {rungs}{points}. Each arm's final {ladder.metric} "
        f"against its training compute ({ladder.compute_unit}) at every point is fitted by "
        "L(C) = E + A·C^-α, each "
        f"seed's ladder on its own (variable projection), with {ladder.level:.0%} t intervals "
        "over seeds; the differences are paired by seed. × is the compute multiplier against "
        f"{ladder.baseline} (as at each rung), extrapolated from the laws only where its "
        "interval's coverage, simulated at this ladder's rungs and noise, is within "
        f"{COVERAGE_TOLERANCE:.0%} of {ladder.level:.0%}. The trend is the mean over seeds of the "
        "slope of the per-point paired Δ (every point the seed ran) against log compute, tested "
        "against 0 and Holm-corrected over the comparisons; it grows when Δ moves in the "
        "variant's favour. Each point's decision "
        "is that point's comparison alone (the single-scale baseline of DataDecide)."
    )


def ladder_section(ladder: Ladder) -> list[Block]:
    """The ladder section: its caption, the arms' fits, the comparisons across the ladder, and
    each comparison rung by rung."""
    blocks: list[Block] = [
        Paragraph(ladder_caption(ladder), "caption"),
        Table(*arm_rows(ladder), "ladder"),
        Table(*result_rows(ladder), "ladder"),
    ]
    for result in ladder.results:
        blocks += [
            Paragraph(f"{result.arm} vs {ladder.baseline}, point by point:", "caption"),
            Table(*rung_rows(ladder, result), "ladder"),
        ]
    return blocks


def rung_title(ladder: Ladder, rung: Rung) -> str:
    """'Rung xs: 1.2M params, 3.4e+12 FLOPs', or at a budget 'Rung xs at 400 steps: 1.2M
    params, 5.1 tokens/param, 3.4e+12 FLOPs'."""
    compute = fmt_compute(rung.compute, ladder.compute_unit)
    if rung.budget is None:
        return f"Rung {rung.name}: {render.fmt_count(rung.params)} params, {compute}"
    ratio = "" if math.isnan(rung.tokens) else f"{rung.tokens_per_param:.3g} tokens/param, "
    return f"Rung {rung.rung} at {rung.budget} steps: {render.fmt_count(rung.params)} params, {ratio}{compute}"


def rung_blocks(
    ladder: Ladder, title: Callable[[Rung], Text], show_noise: bool = False, split: bool = False
) -> list[Block]:
    """Each rung's comparison under its `title` (`render.comparison_blocks`), with its failed
    runs."""
    blocks: list[Block] = []
    for rung in ladder.rungs:
        blocks.append(Heading(3, title(rung)))
        blocks += render.comparison_blocks(rung.comparison, show_noise, split)
        blocks += render.problem_blocks(rung.comparison)
    return blocks


def ladder_blocks(ladder: Ladder, show_noise: bool = False) -> list[Block]:
    """Each rung's comparison as `minimind compare` prints it, then the ladder section."""
    rungs = rung_blocks(ladder, partial(rung_title, ladder), show_noise)
    return [*rungs, Heading(3, "Ladder"), *ladder_section(ladder)]


def to_plain(ladder: Ladder, show_noise: bool = False) -> str:
    return to_plain_blocks(ladder_blocks(ladder, show_noise)) + "\n"


def to_markdown(ladder: Ladder, show_noise: bool = False) -> str:
    return to_markdown_blocks(ladder_blocks(ladder, show_noise)) + "\n"


def records(ladder: Ladder) -> pd.DataFrame:
    """A row per comparison and rung: the rung's figures, then the comparison's ladder figures
    (repeated on each of its rungs), in machine units."""
    rows = []
    for result in ladder.results:
        summary = _summary(ladder, result)
        for _, row in result.rungs.iterrows():
            rung = next(r for r in ladder.rungs if r.name == row["rung"])
            ranks = ladder.ranking.loc[rung.name] if rung.name in ladder.ranking.index else {}
            rows.append(
                {
                    "arm": result.arm,
                    "baseline": ladder.baseline,
                    "rung": rung.name,
                    "budget": rung.budget,
                    "params": rung.params,
                    "tokens_per_param": rung.tokens_per_param,
                    "compute": rung.compute,
                    "compute_unit": ladder.compute_unit,
                    **{k: row[k] for k in row.index if k not in ("rung", "compute")},
                    "decision": decision(row, ladder.maximize),
                    "rank": ranks.get(result.arm, math.nan),
                    "baseline_rank": ranks.get(ladder.baseline, math.nan),
                    **summary,
                }
            )
    return pd.DataFrame(rows)


def _summary(ladder: Ladder, result: LadderResult) -> dict[str, Any]:
    out: dict[str, Any] = {"metric": ladder.metric, "ladder_problem": result.problem}
    for prefix, arm in (("arm", result.arm), ("baseline", ladder.baseline)):
        fit = ladder.arms[arm].fit
        for name in ("exponent", "irreducible", "scale"):
            estimate = getattr(fit, name) if fit is not None else None
            out.update(_estimate_columns(f"{prefix}_{name}", estimate))
    r = result.result
    if r is None:
        for name in ("exponent_difference", "extrapolated_x", "trend_slope"):
            out.update(_estimate_columns(name, None))
        return out
    out.update(_estimate_columns("exponent_difference", r.exponent_difference))
    out.update(_estimate_columns("extrapolated_x", r.extrapolated_multiplier))
    out["extrapolated_to"] = r.extrapolated_to
    out["extrapolated_where"] = r.where
    out["extrapolation_coverage"] = r.extrapolation_coverage
    out["extrapolation_supported"] = r.extrapolation_supported
    out.update(_estimate_columns("trend_slope", r.trend_slope))
    out["trend_p"], out["trend_p_adj"] = r.trend_p, r.trend_p_adj
    out["trend"] = r.trend
    out["trend_points_min"], out["trend_points_max"] = r.trend_points
    out["crossing"] = math.nan if r.crossing is None else r.crossing
    return out


def _estimate_columns(name: str, estimate: Estimate | None) -> dict[str, float]:
    if estimate is None:
        return {name: math.nan, f"{name}_low": math.nan, f"{name}_high": math.nan}
    return {name: estimate.value, f"{name}_low": estimate.low, f"{name}_high": estimate.high}


def to_csv(ladder: Ladder) -> str:
    return records(ladder).to_csv(index=False)


def to_json(ladder: Ladder) -> str:
    """The rungs' comparisons (as `render.to_json` gives each) and the ladder's records."""
    out = {
        "metric": ladder.metric,
        "baseline": ladder.baseline,
        "extrapolate_factor": ladder.extrapolate_factor,
        "rungs": {
            r.name: {
                "rung": r.rung,
                "budget": r.budget,
                "params": r.params,
                "tokens": None if math.isnan(r.tokens) else r.tokens,
                "compute": r.compute,
                "comparison": json.loads(render.to_json(r.comparison)),
            }
            for r in ladder.rungs
        },
        "ladder": json.loads(records(ladder).to_json(orient="records")),
    }
    return json.dumps(out, indent=2) + "\n"
