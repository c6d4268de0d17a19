"""The study report: `index.html` (self-contained, figures inlined), `report.md` with its PNGs,
`findings.csv` (one row per comparison, each arm's tokens per parameter and epochs beside its
verdict), `runs.csv` (every run the study read) and, with `ladders:`, `ladder.csv`.

Per axis: what the literature expects, the table (mean ± sd, the paired Δ with its corrected
interval, the compute multiplier, each arm's budget in tokens and FLOPs), one line per
comparison saying whether it agrees, a line per ladder arm that speaks to the axis, the
discussion, and the figures (validation curves with seed bands, the final values with their
seeds, the learning-rate curves of tuned arms). Then "At more than one scale": each ladder as
`minimind compare` reports it (`compare.ladder_render.ladder_section`, `compare.ladder_plots`),
or what it still lacks. Both files render one `foundations.document.Document`.
"""

from __future__ import annotations

import io
import os
import platform
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from minimind.compare import RunSet, ladder_render, plots, render
from minimind.compare.agreement import agreement_blocks, decision_agreement
from minimind.compare.environment import runs_environment
from minimind.compare.ladder_plots import ladder_figure
from minimind.compare.ladder_report import FIGURE_CAPTION
from minimind.compare.probe_plots import probe_figures
from minimind.compare.report import CSS, devices
from minimind.compare.sensitivity import (
    LR_PARAM,
    LrSensitivity,
    lr_sensitivities,
    sensitivity_rows,
)
from minimind.compare.table import curve_key
from minimind.foundations.document import (
    Block,
    BulletList,
    Cell,
    Document,
    Fields,
    Heading,
    Inline,
    Link,
    Paragraph,
    Preformatted,
    Small,
    Strong,
    Table,
)
from minimind.foundations.document import Figure as FigureBlock
from minimind.record import (
    GIT_COMMIT_TAG,
    PLAN_HASH_TAG,
    PRECISION_TAG,
    TRIAL_NUMBER_TAG,
    is_maximized,
)
from minimind.stats.power import ALPHA
from minimind.stats.sequential import describe_pairs
from minimind.study.analysis import AxisResult, Finding, deciding_interval, rules_out_source
from minimind.study.arm_table import HEADERS as ARM_HEADERS
from minimind.study.arm_table import arm_rows
from minimind.study.cost import COST_FILE, CostTable, read_cost
from minimind.study.data_budget import DataBudget, data_budgets, tokens_per_run
from minimind.study.domain_table import NOTE as DOMAIN_NOTE
from minimind.study.domain_table import axis_domain_rows
from minimind.study.forest import CAPTION as FOREST_CAPTION
from minimind.study.forest import ForestRow, forest_figure
from minimind.study.ladders import LadderReading, axis_pointers
from minimind.study.manifest import ArmComparison, Axis, Sensitivity, Study
from minimind.study.previous import COLUMNS as PREVIOUS_COLUMNS
from minimind.study.previous import compare_findings, read_previous
from minimind.study.scale_agreement import scale_blocks
from minimind.study.streams import command_line
from minimind.study.tuning_figure import ticks_at_values_tried, tuning_figures

STUDY_CSS = """
td.agrees { color: #1a7f37; font-weight: 600; } td.disagrees { color: #cf222e; font-weight: 600; }
td.too-weak-to-tell, td.no-interval { color: #9a6700; }
span.warning { color: #bc4c00; font-weight: 600; font-size: .75rem; }
span.warning::before { content: "⚠ "; }
table.findings td, table.comparison td, table.previous td, table.ladder td { white-space: normal; }
table.findings td, table.previous td, table.findings th, table.previous th { text-align: left; }
table.comparison td:last-child { min-width: 11rem; text-align: left; }
table.comparison td:nth-last-child(2) { min-width: 8rem; text-align: left; }
p.margin { border-left: 3px solid #8c959f; padding: .1rem .9rem; }
.expected { background: #f6f8fa; padding: .5rem .8rem; border-left: 3px solid #8c959f; }
ul.expected { padding-left: 2rem; }
p.discussion { border-left: 3px solid #0969da; padding: .1rem .9rem; margin: 1rem 0; }
"""

AXIS_HEADERS = [
    "arm",
    "vs",
    "seeds",
    "params",
    "tokens/run",
    "FLOPs/run",
    "val/bpb",
    "Δ [deciding interval]",
    "p (adj)",
    "compute ×",
    "ms/step",
    "cost ×",
    "expected",
    "agreement",
]
FINDING_HEADERS = [
    "axis",
    "comparison",
    "expected (source)",
    "Δ [deciding interval]",
    "agreement",
    "scale: params, tokens, epochs",
    "decided by",
]
LADDER_SECTION = "At more than one scale"


NOT_TUNED = "not tuned: a tuned value on its sweep's edge, or beaten past it"


def _delta_cell(finding: Finding, metric: str, comparisons: int) -> Cell:
    """Δ with the one interval that decides the row (`deciding_interval`)."""
    decided = deciding_interval(finding, metric, comparisons)
    if decided is None:
        return Cell(*render.delta_parts(finding.row, metric))
    return Cell(f"{decided.delta:+.4f}", f"[{decided.low:+.4f}, {decided.high:+.4f}]")


def _agreement_cell(finding: Finding, metric: str) -> Cell:
    css = "disagrees" if calibration_failed(finding, metric) else finding.agreement
    warning = NOT_TUNED if finding.edges else ""
    return Cell(_verdict_text(finding, metric), css=css.replace(" ", "-"), warning=warning)


def _agreement_text(finding: Finding, metric: str) -> str:
    text = _verdict_text(finding, metric)
    return f"{text}; {NOT_TUNED}" if finding.edges else text


def expectation_text(c: ArmComparison, margin: float) -> str:
    """'worse by 0.015–0.02 (Shazeer 2020)', 'better', or 'equal within ±0.02'."""
    if c.expect == "equal":
        return f"equal within ±{margin:g}"
    size = c.magnitude_range()
    if size is None:
        return c.expect
    amount = f"{size[0]:g}" if size[0] == size[1] else f"{size[0]:g}–{size[1]:g}"
    return f"{c.expect} by {amount} ({c.source})"


def source_text(c: ArmComparison) -> str:
    """'. <what the source measured>' where `expectation_text` does not quote it already (it
    does with a magnitude); empty without a source."""
    if not c.source or c.magnitude_range() is not None:
        return ""
    return f". {c.source}"


def _verdict_text(finding: Finding, metric: str) -> str:
    if finding.calibration:
        return _calibration_text(finding, metric)
    c, standing = finding.comparison, finding.standing
    if finding.agreement == "disagrees" and c.magnitude_range() is not None:
        decided = deciding_interval(finding, metric, 1)
        maximize = is_maximized(metric)
        if decided and rules_out_source(c, decided.low, decided.high, maximize):
            return f"disagrees: the interval rules out the sourced {expectation_text(c, 0)}"
    if finding.agreement != "too weak to tell":
        return finding.agreement
    if standing is not None and standing.stop == "difference":  # an `equal` that differs
        return (
            "too weak to tell: a difference, whose interval reaches inside "
            f"±{standing.margin:g} (equal within the margin is not ruled out)"
        )
    if standing is not None and standing.stop == "equivalent":  # a direction, equivalent
        return (
            f"too weak to tell: equivalent within ±{standing.margin:g}, so no change larger "
            f"than the margin; a {c.expect} result smaller than it is not ruled out"
        )
    mde = finding.row.get(f"{metric}_mde", np.nan)
    parts = [] if pd.isna(mde) else [f"MDE {mde:.2g}"]
    if finding.plan is not None:
        parts.append(finding.plan.sentence())
    return f"too weak to tell ({'; '.join(parts)})" if parts else finding.agreement


def _calibration_text(finding: Finding, metric: str) -> str:
    """A calibration row: runs of one arm, or two arms equal by construction, must come out no
    different; a difference found between them says the comparison or its noise model is
    wrong."""
    if calibration_failed(finding, metric):
        return "calibration FAILED: a difference where there is none by construction"
    return f"calibration: {_verdict_text(replace(finding, calibration=False), metric)}"


def calibration_failed(finding: Finding, metric: str) -> bool:
    """An A/A row whose test finds a difference, or whose interval lies outside the margin."""
    within_noise = finding.row.get(f"{metric}_within_noise")
    differs = within_noise is not None and not pd.isna(within_noise) and not bool(within_noise)
    return finding.calibration and (differs or finding.agreement == "disagrees")


def comparison_name(finding: Finding) -> str:
    """'good vs base', or 'base B vs base A (A/A calibration)'."""
    name = f"{finding.arm} vs {finding.against}"
    return f"{name} (A/A calibration)" if finding.calibration else name


def sequential_text(finding: Finding) -> str:
    return finding.standing.sentence() if finding.standing is not None else render.MISSING


def decided_by(finding: Finding, metric: str, comparisons: int) -> str:
    """Which interval decides the row and, in the sequential design, where and why it stopped:
    'sequential, look 3 (9 seeds: 0-8): equivalent within ±0.02', without the interval itself
    (the Δ column shows it once)."""
    decided = deciding_interval(finding, metric, comparisons)
    basis = decided.basis if decided else "no interval"
    s = finding.standing
    if s is None:
        return basis
    if s.stop == "open":
        return f"{basis}; sequential: {s.sentence()}"
    return f"sequential, look {s.look} ({s.seeds} seeds: {describe_pairs(s.pairs)}): {s.reason()}"


def scale_text(budget: DataBudget | None) -> str:
    """'1.05M params, 614k tokens (0.585/param), 1.77 epochs'."""
    if budget is None:
        return render.MISSING
    return (
        f"{render.fmt_count(budget.params)} params, {render.fmt_count(budget.tokens)} tokens "
        f"({_ratio(budget.tokens_per_param)}/param), {_ratio(budget.epochs)} epochs"
    )


def observed(finding: Finding, metric: str, comparisons: int = 1) -> str:
    """'LayerNorm − RMSNorm: Δ val/bpb +0.0040 [−0.0100, +0.0180] (paired; fixed sample,
    95%), within noise (MDE 0.02); compute × 0.97': one interval, the one that decides the row
    (`deciding_interval`); the fixed-sample verdict only where that interval is the fixed
    sample's."""
    row = finding.row
    method = row.get(f"{metric}_delta_method", "none")
    decided = deciding_interval(finding, metric, comparisons)
    text = f"{finding.arm} − {finding.against}: Δ {metric} "
    if decided is None:
        text += render.fmt_delta(row, metric)
    else:
        text += f"{decided.delta:+.4f} [{decided.low:+.4f}, {decided.high:+.4f}]"
        text += f" ({method}; {decided.basis})"
    if decided is None or decided.basis.startswith("fixed"):
        text += f", {render.verdict(row, metric, is_maximized(metric))}"
    multiplier = render.fmt_multiplier(row)
    text += f"; compute multiplier {multiplier}" if multiplier != render.MISSING else ""
    s = finding.standing  # the interval's basis above already names its look and seeds
    if s is not None:
        text += f"; sequential: {s.sentence()}" if s.stop == "open" else f"; stopped: {s.reason()}"
    return text + "".join(f"; warning: {edge}" for edge in finding.edges)


def seed_differences(result: AxisResult, finding: Finding) -> str:
    """'; per seed: 0 +0.7591, 1 +0.0161, 2 +0.0395': the arm − reference difference of each
    seed both ran (finished), so that a seed unlike the others (one that stalled) shows beside
    the mean it moves; empty for arms on disjoint seeds (an A/A row)."""
    comparison = result.comparison
    runs = comparison.runs[~comparison.runs["run_id"].isin(comparison.problems["run_id"])]
    final = runs.pivot_table(index="seed", columns="group", values=comparison.metric)
    if finding.arm not in final or finding.against not in final:
        return ""
    d = (final[finding.arm] - final[finding.against]).dropna()
    if d.empty:
        return ""
    return "; per seed: " + ", ".join(f"{int(seed)} {v:+.4f}" for seed, v in d.items())


def axis_rows(
    result: AxisResult, costs: Mapping[str, pd.Series] | None = None, margin: float = np.nan
) -> list[list[Cell]]:
    """The axis table, in `AXIS_HEADERS` order: references first, then each arm; `costs`, the
    measured cost of each arm by label (`CostTable.by_label`), None when none was measured;
    `margin`, the study's equivalence margin its `equal` expectations name."""
    comparison = result.comparison
    m = comparison.metric
    table = comparison.table.set_index("variant")
    runs = comparison.runset.runs
    tokens = tokens_per_run(runs)
    expect = {f.arm: f for f in result.findings}
    order = list(dict.fromkeys(g for f in result.findings for g in (f.against, f.arm)))
    rows = []
    for group in order:
        r = table.loc[group].copy()
        r["is_baseline"] = group not in expect
        finding = expect.get(group)
        flops = tokens.get(group, np.nan) * r["training_flops_per_token"]
        texts = [
            group,
            finding.against if finding else "",
            render.seed_count(r),
            render.fmt_count(r["num_params"]),
            render.fmt_count(tokens.get(group, np.nan)),
            render.MISSING if pd.isna(flops) else f"{flops:.3g}",
            render.fmt_pm(r[f"{m}_mean"], r[f"{m}_std"]),
        ]
        rows.append(
            [
                *map(Cell, texts),
                _delta_cell(finding, m, comparison.n_comparisons) if finding else Cell("reference"),
                Cell(_p_text(finding, r, m, comparison.n_comparisons) if finding else ""),
                Cell(render.fmt_multiplier(r)),
                *_cost_cells(group, costs),
                Cell(expectation_text(finding.comparison, margin) if finding else ""),
                _agreement_cell(finding, m) if finding else Cell(""),
            ]
        )
    return rows


def _p_text(finding: Finding, row: pd.Series, metric: str, comparisons: int) -> str:
    """The corrected p-value where it tests the interval that decides the row (`Decided.step`),
    else '-': beside a sequential or a simultaneous interval it could disagree with it."""
    decided = deciding_interval(finding, metric, comparisons)
    return render.fmt_p(row, metric) if decided is not None and decided.step else render.MISSING


def _cost_cells(label: str, costs: Mapping[str, pd.Series] | None) -> list[Cell]:
    """ms/step (the range over the rounds under it) and the ratio to the cost baseline, as
    measured alone (`minimind study bench`); never the runs' throughput, logged while the
    streams shared the cores."""
    row = None if costs is None else costs.get(label)
    if row is None:
        return [Cell(render.MISSING if costs is None else "not measured"), Cell(render.MISSING)]
    spread = f"[{row['ms_per_step_min']:,.1f}, {row['ms_per_step_max']:,.1f}]"
    return [Cell(f"{row['ms_per_step']:,.1f}", spread), Cell(f"{row['cost_ratio']:.3f}")]


def cost_note(cost: CostTable | None, manifest: str) -> str:
    """How the cost columns were measured, or how to measure them."""
    if cost is None:
        return f"Arm cost: not measured (run `minimind study bench {manifest}`)."
    env = {key: cost.environment.get(key, "unknown") for key in _COST_ENVIRONMENT}
    return (
        f"Arm cost (ms/step, cost ×): each arm's training step measured alone by `minimind "
        f"study bench {manifest}` ({env['measured']}; {env['timing']}; {env['cpu']}, "
        f"{env['device']}, {env['threads']} thread(s), torch {env['torch']}). ms/step is the "
        f"median over the rounds, their range under it; cost × is the median of the per-round "
        f"ratios to {env['cost baseline']}, timed in the same rounds. Not the runs' logged "
        f"throughput: the streams shared the cores."
    )


_COST_ENVIRONMENT = ("measured", "timing", "cpu", "device", "threads", "torch", "cost baseline")


def finding_rows(study: Study, results: list[AxisResult]) -> list[list[Cell]]:
    """The summary: one row per comparison of every axis, the arm's data budget beside its
    verdict."""
    rows = []
    for result in results:
        budgets = data_budgets(result.comparison.runset.runs)
        k = result.comparison.n_comparisons
        for f in result.findings:
            rows.append(
                [
                    Cell(result.axis.name),
                    Cell(comparison_name(f)),
                    Cell(
                        expectation_text(f.comparison, study.equivalence_margin),
                        interval=cited(result.axis.references_of(f.comparison)),
                    ),
                    _delta_cell(f, study.metric, k),
                    _agreement_cell(f, study.metric),
                    Cell(scale_text(budgets.get(f.arm))),
                    Cell(decided_by(f, study.metric, k)),
                ]
            )
    return rows


def cited(references: Sequence[str]) -> str:
    """Sources by author and year ('Zhang & Sennrich 2019'), whose words the report quotes:
    each reference up to its first year."""
    short = (re.match(r"^.*?\b(?:19|20)\d\d\b", ref) for ref in references)
    return "; ".join(m.group(0) for m in short if m)


def _ratio(value: float) -> str:
    return render.MISSING if pd.isna(value) else f"{value:.3g}"


def sensitivity_figure(sensitivity: Sensitivity, runset: RunSet, metric: str) -> Figure | None:
    """The final objective of every trial against `sensitivity.x`, a line per `by` value;
    trials that finished without the objective (diverged, failed) are crosses at the top. Runs
    of the experiment that are no trial (`minimind run best.yaml` logs beside them) are left
    out."""
    trial = runset.runs.get(f"tags.{TRIAL_NUMBER_TAG}", pd.Series(dtype=object))
    runs = runset.runs[trial.reindex(runset.runs.index).notna()]
    x_col, by_col = f"params.{sensitivity.x}", f"params.{sensitivity.by}"
    if x_col not in runs or by_col not in runs:
        return None
    values = pd.to_numeric(runs.get(f"metrics.{metric}"), errors="coerce")
    done = (runs["status"] == "FINISHED") & values.notna()
    fig, ax = plt.subplots(figsize=(7.5, 4.5), layout="constrained")
    top = values[done].max() if done.any() else 1.0
    for k, (group, mine) in enumerate(runs.groupby(by_col, sort=True)):
        x = pd.to_numeric(mine[x_col], errors="coerce")
        ok = done[mine.index]
        order = np.argsort(x[ok].to_numpy())
        color = plt.get_cmap("tab10")(k)
        ax.plot(
            x[ok].to_numpy()[order], values[mine.index][ok].to_numpy()[order], "o-",
            color=color, label=f"{sensitivity.by} = {group}",
        )  # fmt: skip
        if (~ok).any():
            ax.plot(x[~ok], np.full((~ok).sum(), top), "x", color=color, ms=10)
    if sensitivity.log_x:
        ax.set_xscale("log")
    ticks_at_values_tried(ax, sorted(pd.to_numeric(runs[x_col], errors="coerce").dropna().unique()))
    ax.set_xlabel(sensitivity.x)
    ax.set_ylabel(f"final {metric} of each trial run")
    ax.set_title(f"{sensitivity.experiment}: {metric} against {sensitivity.x} (x: no result)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def axis_figures(
    study: Study, result: AxisResult, sweeps: Mapping[str, RunSet]
) -> dict[str, Figure]:
    """The axis's figures by file stem: curves, final values, probes, the learning-rate curves
    of its `sensitivity:` entries and its tuned arms' tuning runs (`tuning_figure`)."""
    comparison = result.comparison
    curve = curve_key(comparison.runset, study.metric)
    comparison.runset.fetch_histories([curve, *(k for k, _ in plots.X_AXES[1:])])
    name = result.axis.name
    comparison.runset.fetch_histories([TRAIN_LOSS])
    figures = {
        f"{name}_curves": plots.curves_figure(comparison, curve),
        f"{name}_train_loss": plots.curves_figure(comparison, TRAIN_LOSS),
        f"{name}_final": plots.final_bar_figure(comparison),
    }
    # the probe curves the axis's finding rests on (`Axis.probes`), where the arms logged them
    if result.axis.probes:
        drawn = probe_figures(comparison)
        figures |= {
            f"{name}_probe_{probe}": drawn.get(f"probe_{probe}") for probe in result.axis.probes
        }
    for k, sensitivity in enumerate(result.axis.sensitivity):
        figures[f"{name}_lr{k}"] = sensitivity_figure(
            sensitivity, sweeps[sensitivity.experiment], study.metric
        )
    tuned = tuning_figures(result.tuning, study.metric, f"{name}: each arm's tuning runs")
    figures |= {f"{name}_tuning{k}": fig for k, fig in enumerate(tuned.values())}
    return {stem: fig for stem, fig in figures.items() if fig is not None}


TRAIN_LOSS = "train/loss"
"""The training loss's curve: every logged window, beside the validation curve's evaluations."""


def environment(study: Study, results: list[AxisResult]) -> dict[str, str]:
    """What the runs were trained and the report made with: versions, processor, threads, git
    commits and spec hashes (as the runs recorded them), the environment each run recorded
    (`runs_environment`: its torch, numpy and Python, BLAS build, CPU or GPU, whether its tree
    was dirty), dates and total training time; `processor`, `torch` and `python` are those of
    the machine that makes the report."""
    import torch

    runs = pd.concat([r.comparison.runset.runs for r in results], ignore_index=True)
    runs = runs.drop_duplicates("run_id")

    def tags(key: str) -> str:
        column = runs.get(f"tags.{key}", pd.Series(dtype=object)).dropna().astype(str)
        return ", ".join(sorted(set(column))) or "unknown"

    hashes = runs.groupby("experiment_id")[f"tags.{PLAN_HASH_TAG}"].agg(
        lambda s: ", ".join(sorted(set(s.dropna().astype(str))))
    )
    names = {
        e: name for result in results for e, name in _experiment_names(result.comparison.runset)
    }
    starts = pd.to_datetime(runs["start_time"], utc=True)
    ends = pd.to_datetime(runs["end_time"], utc=True)
    busy = (ends - starts).dt.total_seconds().sum()
    return {
        "study": study.name,
        "runs read": f"{len(runs)} (every invocation, the newest run of each arm and seed)",
        "experiments and spec hashes": "; ".join(
            f"{names.get(e, e)}: {h}" for e, h in hashes.items()
        ),
        "git commit of the runs": tags(GIT_COMMIT_TAG),
        **{  # the provenance each run recorded (`compare.environment`)
            f"{item} (as the runs recorded it)": value
            for item, value in runs_environment(runs).items()
            if item != "git commit"
        },
        "device": devices(runs),
        "precision": tags(PRECISION_TAG),
        "trained": f"{starts.min():%Y-%m-%d %H:%M} to {ends.max():%Y-%m-%d %H:%M} UTC "
        f"({(ends.max() - starts.min()).total_seconds() / 60:.0f} min wall-clock; "
        f"{busy / 60:.0f} min of run time in all)",
        "training processes": f"{len(study.streams)} side by side, "
        f"OMP_NUM_THREADS={study.threads_per_stream} each",
        "processor": _processor(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "tracking URI": results[0].comparison.runset.store,
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _experiment_names(runset: RunSet) -> list[tuple[str, str]]:
    ids = runset.runs["experiment_id"].dropna().unique()
    return [(i, runset.client.get_experiment(i).name) for i in ids]


def _processor() -> str:
    """The CPU model and core count (Linux's /proc/cpuinfo; the platform's answer elsewhere)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _commands(study: Study) -> list[str]:
    lines = [
        f"# stream {k + 1}" + "\n" + "\n".join(map(command_line, s))
        for k, s in enumerate(study.streams)
    ]
    return [f"OMP_NUM_THREADS={study.threads_per_stream} (each stream on its own)", *lines]


def _axis_blocks(
    study: Study,
    result: AxisResult,
    pngs: Mapping[str, bytes | None],
    costs: Mapping[str, pd.Series] | None,
    ladders: Sequence[LadderReading] = (),
    sensitivity: Sequence[LrSensitivity] = (),
) -> list[Block]:
    """An axis's section: what is expected, the table, what was observed, the discussion, the
    figures (`pngs`, by file stem), and the lr sensitivity of the arms its sweeps tuned."""
    axis, m, margin = result.axis, study.metric, study.equivalence_margin
    k = result.comparison.n_comparisons
    observations: list[list[Inline]] = [
        [Strong(_agreement_text(f, m)), f": {observed(f, m, k)}{seed_differences(result, f)}"]
        for f in result.findings
    ]
    observations += [
        [Link(line, f"#{reading.anchor}")]
        for reading in ladders
        for line in axis_pointers([reading], axis.name)
    ]
    blocks: list[Block] = [
        Heading(2, axis.title, anchor=axis.name),
        Paragraph([Strong("Expected"), f": {axis.expected}"], "expected"),
        BulletList(
            [
                [
                    f"{comparison_name(f)}: {expectation_text(f.comparison, margin)}"
                    f"{source_text(f.comparison)} ",
                    Small(f"({'; '.join(axis.references_of(f.comparison))})"),
                ]
                for f in result.findings
            ],
            "expected",
        ),
        Paragraph(render.caption(result.comparison), "caption"),
        Table(AXIS_HEADERS, axis_rows(result, costs, margin), "comparison"),
        *domain_blocks(result),
        Paragraph([Strong("Observed"), ":"]),
        BulletList(observations),
    ]
    if axis.discussion:
        blocks.append(Paragraph([Strong("Discussion"), f": {axis.discussion}"], "discussion"))
    blocks += [FigureBlock(f"{stem}.png", data=png) for stem, png in pngs.items()]
    if sensitivity:
        blocks += [
            Paragraph(sensitivity_note(sensitivity[0].level), "caption"),
            Table(*sensitivity_rows(list(sensitivity)), "comparison"),
        ]
    return blocks


def domain_blocks(result: AxisResult) -> list[Block]:
    """The axis's per-domain table with its note (`domain_table`); none without a suite."""
    headers, rows = axis_domain_rows(result)
    if not rows:
        return []
    return [Paragraph(DOMAIN_NOTE, "caption"), Table(headers, rows, "comparison")]


def sensitivity_note(level: float) -> str:
    return (
        "Lr sensitivity of each tuned arm (Wortsman et al. 2023), from its sweep's trials: per "
        "tuning seed, the mean over the lrs tried of min(final val/loss, initial loss) minus "
        "the best final loss (nats; the initial loss is ln(vocabulary), a diverged trial counts "
        f"at it), then the mean over seeds with a {100 * level:.4g}% t interval (none with one "
        "tuning seed). An arm is its sweep cell's trials, over its own grid (the runs past it "
        "left out); for an axis's `sensitivity:` entry, the trials that share the value of its "
        "`by` param, the lr its `x`, at each lr its best trial over the other params searched "
        "beside it (a warm-up)."
    )


def tuned_sensitivity(result: AxisResult, level: float = 1 - ALPHA) -> list[LrSensitivity]:
    """The lr sensitivity of each of the axis's tuned arms, from its sweep cell's trials,
    named by its label."""
    return [
        replace(found, arm=label)
        for label, curves in result.tuning.items()
        for curve in curves
        if curve.param == LR_PARAM
        for found in lr_sensitivities(curve.trials, level, lr_param=curve.param)
    ]


SensitivityKey = tuple[str, str, str]
"""A `sensitivity:` entry's (experiment, x, by): what its rows are computed from."""


def study_sensitivity(
    study: Study, sweeps: Mapping[str, RunSet], level: float = 1 - ALPHA
) -> dict[SensitivityKey, list[LrSensitivity]]:
    """The lr sensitivity of every distinct `sensitivity:` entry of the study, each computed
    once (an experiment listed under two axes is read once), from the sweeps' trials, at
    `level`, the entry's `x` as the lr and its `by` as the arm; each arm named after its
    sweep."""
    out: dict[SensitivityKey, list[LrSensitivity]] = {}
    for entry in (e for axis in study.axes for e in axis.sensitivity):
        key = (entry.experiment, entry.x, entry.by)
        if key in out:
            continue
        runs = sweeps[entry.experiment].runs
        trial = runs.get(f"tags.{TRIAL_NUMBER_TAG}", pd.Series(None, index=runs.index))
        trials = runs[trial.notna()]
        found = lr_sensitivities(trials, level, lr_param=entry.x, by=entry.by)
        out[key] = [replace(r, arm=f"{entry.experiment}: {r.arm}") for r in found]
    return out


def axis_sensitivity(
    axis: Axis, computed: Mapping[SensitivityKey, list[LrSensitivity]]
) -> list[LrSensitivity]:
    """The rows of the axis's `sensitivity:` entries, from `study_sensitivity`, each once."""
    keys = dict.fromkeys((e.experiment, e.x, e.by) for e in axis.sensitivity)
    return [r for key in keys for r in computed.get(key, [])]


def _ladder_blocks(ladders: Sequence[LadderReading], pngs: Mapping[str, bytes]) -> list[Block]:
    """The section "At more than one scale": each ladder as `minimind compare` reports it."""
    if not ladders:
        return []
    blocks: list[Block] = [
        Heading(2, LADDER_SECTION, anchor="ladders"),
        Paragraph(_LADDER_NOTE, "caption"),
    ]
    for reading in ladders:
        entry = reading.entry
        blocks.append(Heading(3, entry.title, anchor=reading.anchor))
        if reading.notes:
            blocks.append(BulletList(reading.notes, "expected"))
        if reading.ladder is not None:
            stem = _ladder_stem(reading)
            blocks += ladder_render.ladder_section(reading.ladder)
            blocks.append(FigureBlock(f"{stem}.png", FIGURE_CAPTION, pngs.get(stem)))
            table = decision_agreement(reading.ladder)
            blocks += agreement_blocks(table, reading.ladder.baseline, level=4)
        if entry.discussion:
            blocks.append(Paragraph([Strong("Discussion"), f": {entry.discussion}"], "discussion"))
    return blocks


_LADDER_NOTE = (
    "The ladders the study trains beside its axes, each compared as `minimind compare` "
    "compares a ladder's runs (docs/statistics.md, Ladders): the compute multiplier at each "
    "rung, each arm's fitted law, the difference of the exponents, the multiplier extrapolated "
    "past the top rung, its trend with compute, what each rung alone would decide, and how "
    "often that is what the largest rung decides (decision agreement)."
)


def _ladder_stem(reading: LadderReading) -> str:
    return f"ladder{reading.index}"


def document(
    study: Study,
    results: list[AxisResult],
    pngs: Mapping[str, bytes],
    stems: Mapping[str, list[str]],
    env: dict[str, str],
    cost: CostTable | None = None,
    manifest: str = "MANIFEST",
    ladders: Sequence[LadderReading] = (),
    sensitivity: Mapping[str, list[LrSensitivity]] | None = None,
    previous: pd.DataFrame | None = None,
    scale: pd.DataFrame | None = None,
) -> Document:
    """The report: the findings, a section per axis (its figures by file stem in `stems`, their
    PNGs in `pngs`, inlined in the HTML where given; the lr sensitivity of its tuned arms by
    axis name in `sensitivity`, `axis_sensitivity`), the ladders, the environment and the
    commands; `cost`, the arms' measured cost (`read_cost`), and `manifest`, the path the
    command to measure it names; `previous`, the table `previous.compare_findings` makes
    against the study's `previous:` findings; `scale`, the decisions across scale
    (`scale_agreement.scale_agreement`)."""
    costs = None if cost is None else cost.by_label(study)
    if not costs:  # a table whose rows are all stale, or of arms since renamed, measures none
        cost = costs = None
    blocks: list[Block] = [
        Paragraph(study.description),
        Heading(2, "Findings"),
        Paragraph(_method_note(study), "caption"),
        *margin_blocks(study),
        Paragraph(cost_note(cost, manifest), "caption"),
        Table(FINDING_HEADERS, finding_rows(study, results), "findings"),
    ]
    if FOREST in pngs:
        blocks.append(FigureBlock(f"{FOREST}.png", FOREST_CAPTION, pngs[FOREST]))
    blocks += previous_blocks(study, previous)
    if scale is not None:
        blocks += scale_blocks(scale)
    blocks += [
        Heading(2, "Arms: settings and train/val gap", anchor="arms"),
        Paragraph(ARMS_NOTE, "caption"),
        Table(ARM_HEADERS, arm_rows(all_arm_runs(results)), "comparison"),
    ]
    for r in results:
        figures = {stem: pngs.get(stem) for stem in stems.get(r.axis.name, [])}
        tuned = (sensitivity or {}).get(r.axis.name, [])
        blocks += _axis_blocks(study, r, figures, costs, ladders, tuned)
    blocks += _ladder_blocks(ladders, pngs)
    blocks += [
        Heading(2, "Environment"),
        Fields(env),
        Heading(2, "Commands"),
        Preformatted("\n\n".join(_commands(study))),
    ]
    return Document(study.title, blocks, CSS + STUDY_CSS)


FOREST = "forest"
"""The forest plot's file stem."""
ARMS_NOTE = (
    "Each arm's settings as its runs logged them (a value per seed where they differ), its "
    "size and tokens per run, and its train/val gap at the end: val/loss minus the last log "
    "window's train/loss (nats, mean ± sd over the finished seeds). Each training batch's loss "
    "is taken before the model learns from it, and within one epoch no text repeats: the gap "
    "is not memorisation but how the held-out split (its mix of domains and documents) differs "
    "from the training stream (mixed by the sources' weights) for that model."
)


def all_arm_runs(results: Sequence[AxisResult]) -> pd.DataFrame:
    """Every arm's runs once (`variant`: its label), in the order the axes first name them."""
    runs = pd.concat([r.comparison.runset.runs for r in results], ignore_index=True)
    return runs.drop_duplicates(["variant", "run_id"])


def margin_blocks(study: Study) -> list[Block]:
    """The equivalence margin and why it is the smallest effect of interest, or a note that the
    manifest does not say."""
    why = study.margin_rationale or "not stated (the manifest's margin_rationale)"
    return [
        Paragraph(
            [Strong(f"Equivalence margin ±{study.equivalence_margin:g}"), f": {why}"], "margin"
        )
    ]


def previous_blocks(study: Study, table: pd.DataFrame | None) -> list[Block]:
    """The section comparing this study's findings with the previous study's."""
    if study.previous is None or table is None:
        return []
    counts = table["status"].value_counts()
    summary = "; ".join(f"{status}: {n}" for status, n in counts.items())
    return [
        Heading(2, f"Compared with the {study.previous.label}", anchor="previous"),
        Paragraph(
            f"Each comparison's outcome here against the {study.previous.label}'s "
            f"({study.previous.findings}): better, worse (a difference in that direction), "
            "equal (equivalent within the margin) or undecided, with its agreement with the "
            "expectation; a finding holds when both studies decided it the same way, flips "
            f"when they decided it apart. {summary}.",
            "caption",
        ),
        Table(
            PREVIOUS_COLUMNS,
            [[Cell(str(v)) for v in row] for row in table.itertuples(index=False)],
            "previous",
        ),
    ]


def forest_rows(study: Study, results: Sequence[AxisResult]) -> list[ForestRow]:
    """A forest-plot row per comparison, in the findings' order."""
    return [
        ForestRow(
            f"{r.axis.name}: {comparison_name(f)}",
            deciding_interval(f, study.metric, r.comparison.n_comparisons),
            f.comparison,
            "disagrees" if calibration_failed(f, study.metric) else f.agreement,
        )
        for r in results
        for f in r.findings
    ]


def _method_note(study: Study) -> str:
    return (
        f"Each axis is one family: its comparisons' p-values are {study.correction}-corrected "
        f"together. Each row shows the one interval that decides it: the sequential design's "
        f"repeated interval where it stopped or reached the cap; else, for an 'equal' "
        f"expectation or an A/A row, the simultaneous one; else the fixed-sample interval at the "
        f"level of its Holm step, beside its corrected p-value (it excludes 0 exactly when that "
        f"p-value is below 0.05); no other interval has a p-value beside it. Δ is arm − reference "
        f"in {study.metric} ({'higher' if is_maximized(study.metric) else 'lower'} is better), "
        f"paired by seed where both arms ran the same "
        f"seeds. 'better'/'worse' expectations agree when the corrected test finds a "
        f"difference in that direction; 'equal' agrees when the whole interval lies within "
        f"±{study.equivalence_margin:g} (an equivalence test), disagrees when it lies wholly "
        f"outside; otherwise the design is too weak to tell, with the smallest difference it "
        f"detects with 80% power (MDE) and the pairs of seeds that would settle it with 80% "
        f"power (a difference of {study.equivalence_margin:g}, or equivalence within that "
        f"margin by TOST), with their range over the interval of the measured sd. The "
        f"sequential design (looks at {', '.join(map(str, study.sequential.looks))} seeds, "
        f"{study.sequential.spending.replace('_', '-')}-type alpha spending, Holm per axis) "
        f"says at which look each comparison stopped, with which seeds and why, or the look it "
        f"waits for; its repeated interval holds the error across looks. An A/A row, the study's "
        f"calibration, compares an arm with itself on disjoint seeds (unpaired) or two arms "
        f"equal by construction seed by seed (paired): it must find no difference."
    )


def ladders_csv(ladders: Sequence[LadderReading]) -> str:
    """`ladder.csv`: `minimind compare`'s ladder records (`ladder_render.records`) of each
    ladder, its experiment first; a ladder without a comparison yet, one row of its notes."""
    frames = [
        ladder_render.records(r.ladder).assign(ladder_notes=" | ".join(r.notes) or None)
        if r.ladder is not None
        else pd.DataFrame([{"ladder_notes": " | ".join(r.notes)}])
        for r in ladders
    ]
    frames = [
        frame.assign(ladder=r.entry.experiment)[["ladder", *frame.columns]]
        for r, frame in zip(ladders, frames, strict=True)
    ]
    return pd.concat(frames, ignore_index=True).to_csv(index=False)


def _decided_columns(finding: Finding, metric: str, comparisons: int) -> dict[str, object]:
    """The interval that decides the row (`deciding_interval`): which of findings.csv's other
    intervals (fixed-sample, simultaneous, sequential) it is, named in `decided_basis`."""
    decided = deciding_interval(finding, metric, comparisons)
    if decided is None:
        return {"decided_low": None, "decided_high": None, "decided_basis": None}
    return {
        "decided_low": decided.low,
        "decided_high": decided.high,
        "decided_basis": decided.basis,
    }


def findings_csv(study: Study, results: list[AxisResult]) -> str:
    m = study.metric
    budgets = {r.axis.name: data_budgets(r.comparison.runset.runs) for r in results}
    nothing = DataBudget(np.nan, np.nan, np.nan)
    records = [
        {
            "axis": r.axis.name,
            "arm": f.arm,
            "against": f.against,
            "expect": f.comparison.expect,
            "agreement": f.agreement,
            **_budget_columns(budgets[r.axis.name].get(f.arm, nothing)),
            **_decided_columns(f, m, r.comparison.n_comparisons),
            "calibration": f.calibration,
            "tuning_edges": " | ".join(f.edges) or None,
            "sequential_stop": f.standing.stop if f.standing else None,
            "sequential_look": f.standing.look if f.standing else None,
            "sequential_seeds": f.standing.seeds if f.standing else None,
            "sequential_seeds_used": describe_pairs(f.standing.pairs) if f.standing else None,
            "sequential_low": f.standing.low if f.standing else None,
            "sequential_high": f.standing.high if f.standing else None,
            "plan_goal": f.plan.goal if f.plan else None,
            "plan_seeds": f.plan.seeds if f.plan else None,
            "plan_seeds_low": f.plan.fewest if f.plan else None,
            "plan_seeds_high": f.plan.most if f.plan else None,
            **{
                key: f.row.get(key, np.nan)
                for key in (
                    f"{m}_mean",
                    f"{m}_std",
                    f"{m}_delta",
                    f"{m}_delta_low",
                    f"{m}_delta_high",
                    f"{m}_delta_level",
                    f"{m}_delta_method",
                    f"{m}_p",
                    f"{m}_p_adj",
                    f"{m}_mde",
                    "compute_x",
                    "compute_x_bound",
                    "compute_x_where",
                    "compute_x_low",
                    "compute_x_high",
                    "n",
                    f"{m}_pairs",
                )  # fmt: skip
            },
        }
        for r in results
        for f in r.findings
    ]
    return pd.DataFrame(records).to_csv(index=False)


def previous_table(study: Study, findings: str, old: pd.DataFrame | None) -> pd.DataFrame | None:
    """This study's findings (`findings_csv`'s text) against the `previous:` study's, `old`
    (`previous.compare_findings`); None without them."""
    if old is None:
        return None
    label = {key: arm.label for key, arm in study.arms.items()}
    why = {(label[c.arm], label[c.against]): c.why for axis in study.axes for c in axis.comparisons}
    current = pd.read_csv(io.StringIO(findings))
    return compare_findings(
        old, current, why, study.metric, is_maximized(study.metric), study.previous_rows()
    )


def _budget_columns(budget: DataBudget) -> dict[str, float]:
    return {
        "train_tokens": budget.tokens,
        "num_params": budget.params,
        "train_split_tokens": budget.split_tokens,
        "tokens_per_param": budget.tokens_per_param,
        "epochs": budget.epochs,
    }


def write_report(
    study: Study,
    results: list[AxisResult],
    sweeps: Mapping[str, RunSet],
    folder: Path,
    manifest: str = "MANIFEST",
    ladders: Sequence[LadderReading] = (),
    previous: pd.DataFrame | None = None,
    scale: pd.DataFrame | None = None,
) -> Path:
    """Write the report into `folder` (made if missing) and return its `index.html`; the arms'
    cost comes from the cost.csv `minimind study bench {manifest}` wrote, in `folder` or else
    in the manifest's `report_dir` (a report re-rendered elsewhere reads the committed one),
    never another study's; `previous`, the findings of the manifest's `previous:` study
    (`previous.read_previous`, read here when not given); `scale`, the decisions across scale
    (`scale_agreement.scale_agreement`), written as scale_agreement.csv too."""
    if study.previous is not None and previous is None:
        previous = read_previous(study.previous.findings, study.previous_rows())
    folder.mkdir(parents=True, exist_ok=True)
    tables = (read_cost(d / COST_FILE) for d in (folder, study.report_dir))  # lazily: one read
    cost = next(
        (t for t in tables if t is not None and t.environment.get("study") == study.name), None
    )
    pngs: dict[str, bytes] = {}
    stems: dict[str, list[str]] = {}
    forest = forest_figure(
        forest_rows(study, results),
        study.equivalence_margin,
        study.metric,
        is_maximized(study.metric),
    )
    if forest is not None:
        pngs[FOREST] = _png(forest)
        (folder / f"{FOREST}.png").write_bytes(pngs[FOREST])
    for result in results:
        for stem, fig in axis_figures(study, result, sweeps).items():
            pngs[stem] = _png(fig)
            (folder / f"{stem}.png").write_bytes(pngs[stem])
            stems.setdefault(result.axis.name, []).append(stem)
    for reading in ladders:
        if reading.ladder is not None:
            stem = _ladder_stem(reading)
            pngs[stem] = _png(ladder_figure(reading.ladder))
            (folder / f"{stem}.png").write_bytes(pngs[stem])
    if ladders:
        (folder / "ladder.csv").write_text(ladders_csv(ladders), encoding="utf-8")
    env = environment(study, results)
    findings = findings_csv(study, results)
    (folder / "findings.csv").write_text(findings, encoding="utf-8")
    runs = pd.concat([r.comparison.runs.assign(axis=r.axis.name) for r in results])
    runs.to_csv(folder / "runs.csv", index=False, encoding="utf-8")
    if scale is not None:
        scale.to_csv(folder / "scale_agreement.csv", index=False, encoding="utf-8")
    computed = study_sensitivity(study, sweeps)
    sensitivity = {
        r.axis.name: [*tuned_sensitivity(r), *axis_sensitivity(r.axis, computed)] for r in results
    }
    page = document(
        study, results, pngs, stems, env, cost, manifest, ladders, sensitivity,
        previous_table(study, findings, previous), scale,
    )  # fmt: skip
    (folder / "report.md").write_text(page.markdown(), encoding="utf-8")
    index = folder / "index.html"
    index.write_text(page.html(), encoding="utf-8")
    print(f"Study report written to {index}", file=sys.stderr)
    return index
