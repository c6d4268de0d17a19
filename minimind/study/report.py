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
from matplotlib.ticker import FuncFormatter, NullFormatter

from minimind.compare import RunSet, ladder_render, plots, render
from minimind.compare.agreement import agreement_blocks, decision_agreement
from minimind.compare.environment import runs_environment
from minimind.compare.ladder_plots import ladder_figure
from minimind.compare.ladder_report import FIGURE_CAPTION
from minimind.compare.probe_plots import probe_figures
from minimind.compare.report import CSS, devices
from minimind.compare.sensitivity import LrSensitivity, lr_sensitivities, sensitivity_rows
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
from minimind.stats.sequential import describe_pairs
from minimind.study.analysis import AxisResult, Finding
from minimind.study.cost import COST_FILE, CostTable, read_cost
from minimind.study.data_budget import DataBudget, data_budgets, tokens_per_run
from minimind.study.ladders import LadderReading, axis_pointers
from minimind.study.manifest import Axis, Sensitivity, Study
from minimind.study.streams import command_line

STUDY_CSS = """
td.agrees { color: #1a7f37; font-weight: 600; } td.disagrees { color: #cf222e; font-weight: 600; }
td.too-weak-to-tell, td.no-interval { color: #9a6700; }
table.findings td { white-space: normal; text-align: left; }
table.comparison td:last-child { white-space: normal; min-width: 13rem; text-align: left; }
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
    "Δ [CI]",
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
    "expected",
    "observed Δ [CI]",
    "agreement",
    "tokens/param",
    "epochs",
    "sequential design: look, seeds, why",
]
LADDER_SECTION = "At more than one scale"


def _delta_cell(row: pd.Series, metric: str) -> Cell:
    return Cell(*render.delta_parts(row, metric))


def _agreement_cell(finding: Finding, metric: str) -> Cell:
    css = "disagrees" if calibration_failed(finding, metric) else finding.agreement
    return Cell(_agreement_text(finding, metric), css=css.replace(" ", "-"))


def _agreement_text(finding: Finding, metric: str) -> str:
    text = _verdict_text(finding, metric)
    if not finding.edges:
        return text
    return f"{text}; not tuned: a tuned value on its sweep's edge, or beaten past it"


def _verdict_text(finding: Finding, metric: str) -> str:
    if finding.calibration:
        return _calibration_text(finding, metric)
    if finding.agreement != "too weak to tell":
        return finding.agreement
    standing = finding.standing
    if standing is not None and standing.stop == "difference":  # an `equal` that differs
        return (
            "too weak to tell: a difference, whose interval reaches inside "
            f"±{standing.margin:g} (equal within the margin is not ruled out)"
        )
    mde = finding.row.get(f"{metric}_mde", np.nan)
    parts = [] if pd.isna(mde) else [f"MDE {mde:.2g}"]
    if finding.plan is not None:
        parts.append(finding.plan.sentence())
    return f"too weak to tell ({'; '.join(parts)})" if parts else finding.agreement


def _calibration_text(finding: Finding, metric: str) -> str:
    """An A/A row: runs of one arm must come out no different; a difference found between them
    says the comparison or its noise model is wrong."""
    if calibration_failed(finding, metric):
        return "calibration FAILED: runs of one arm differ"
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


def observed(finding: Finding, metric: str) -> str:
    """'LayerNorm − RMSNorm: Δ val/bpb +0.0040 [−0.0100, +0.0180] (paired, 95% CI), within
    noise (MDE 0.02); compute × 0.97'."""
    row = finding.row
    method = row.get(f"{metric}_delta_method", "none")
    level = render.fmt_level(row.get(f"{metric}_delta_level", 0.95))
    text = f"{finding.arm} − {finding.against}: Δ {metric} {render.fmt_delta(row, metric)}"
    if method not in ("none", "baseline"):
        text += f" ({method}, {level} CI)"
    text += f", {render.verdict(row, metric, is_maximized(metric))}"
    multiplier = render.fmt_multiplier(row)
    text += f"; compute multiplier {multiplier}" if multiplier != render.MISSING else ""
    text += f"; sequential: {sequential_text(finding)}" if finding.standing else ""
    return text + "".join(f"; warning: {edge}" for edge in finding.edges)


def axis_rows(result: AxisResult, costs: Mapping[str, pd.Series] | None = None) -> list[list[Cell]]:
    """The axis table, in `AXIS_HEADERS` order: references first, then each arm; `costs`, the
    measured cost of each arm by label (`CostTable.by_label`), None when none was measured."""
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
                _delta_cell(r, m) if finding else Cell("reference"),
                Cell(render.fmt_p(r, m) if finding else ""),
                Cell(render.fmt_multiplier(r)),
                *_cost_cells(group, costs),
                Cell(finding.comparison.expect if finding else ""),
                _agreement_cell(finding, m) if finding else Cell(""),
            ]
        )
    return rows


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
        for f in result.findings:
            budget = budgets.get(f.arm)
            rows.append(
                [
                    Cell(result.axis.name),
                    Cell(comparison_name(f)),
                    Cell(f.comparison.expect, interval=_cited(result.axis)),
                    _delta_cell(f.row, study.metric),
                    _agreement_cell(f, study.metric),
                    Cell(_ratio(budget.tokens_per_param if budget else np.nan)),
                    Cell(_ratio(budget.epochs if budget else np.nan)),
                    Cell(sequential_text(f)),
                ]
            )
    return rows


def _cited(axis: Axis) -> str:
    """The axis's sources by author and year ('Zhang & Sennrich 2019'), whose words its section
    quotes: each reference up to its first year."""
    short = (re.match(r"^.*?\b(?:19|20)\d\d\b", ref) for ref in axis.references)
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
    # Ticks at the values tried, written plainly (0.004, not 4m or 4×10⁻³), and no others.
    ax.set_xticks(sorted(pd.to_numeric(runs[x_col], errors="coerce").dropna().unique()))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(sensitivity.x)
    ax.set_ylabel(f"final {metric} of each trial run")
    ax.set_title(f"{sensitivity.experiment}: {metric} against {sensitivity.x} (x: no result)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def axis_figures(
    study: Study, result: AxisResult, sweeps: Mapping[str, RunSet]
) -> dict[str, Figure]:
    """The axis's figures by file stem: curves, final values, probes, learning-rate curves."""
    comparison = result.comparison
    curve = curve_key(comparison.runset, study.metric)
    comparison.runset.fetch_histories([curve, *(k for k, _ in plots.X_AXES[1:])])
    name = result.axis.name
    figures = {
        f"{name}_curves": plots.curves_figure(comparison, curve),
        f"{name}_final": plots.final_bar_figure(comparison),
    }
    # the probe curves, where the arms were trained with `train.probe_every`
    figures |= {f"{name}_{stem}": fig for stem, fig in probe_figures(comparison).items()}
    for k, sensitivity in enumerate(result.axis.sensitivity):
        figures[f"{name}_lr{k}"] = sensitivity_figure(
            sensitivity, sweeps[sensitivity.experiment], study.metric
        )
    return {stem: fig for stem, fig in figures.items() if fig is not None}


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
    axis, m = result.axis, study.metric
    observations: list[list[Inline]] = [
        [Strong(_agreement_text(f, m)), f": {observed(f, m)}"] for f in result.findings
    ]
    observations += [
        [Link(line, f"#{reading.anchor}")]
        for reading in ladders
        for line in axis_pointers([reading], axis.name)
    ]
    blocks: list[Block] = [
        Heading(2, axis.title, anchor=axis.name),
        Paragraph(
            [Strong("Expected"), f": {axis.expected} ", Small(f"({'; '.join(axis.references)})")],
            "expected",
        ),
        Paragraph(render.caption(result.comparison), "caption"),
        Table(AXIS_HEADERS, axis_rows(result, costs), "comparison"),
        Paragraph([Strong("Observed"), ":"]),
        BulletList(observations),
    ]
    if axis.discussion:
        blocks.append(Paragraph([Strong("Discussion"), f": {axis.discussion}"], "discussion"))
    blocks += [FigureBlock(f"{stem}.png", data=png) for stem, png in pngs.items()]
    if sensitivity:
        blocks += [
            Paragraph(SENSITIVITY_NOTE, "caption"),
            Table(*sensitivity_rows(list(sensitivity)), "comparison"),
        ]
    return blocks


SENSITIVITY_NOTE = (
    "Lr sensitivity of each tuned arm (Wortsman et al. 2023), from its sweep's trials: per "
    "tuning seed, the mean over the lrs tried of min(final val/loss, initial loss) minus the "
    "best final loss (nats; the initial loss is ln(vocabulary), a diverged trial counts at it), "
    "then the mean over seeds with a 95% t interval (none with one tuning seed). An arm is the "
    "trials that share every setting but the lr (a warm-up searched beside it makes an arm per "
    "warm-up)."
)


def axis_sensitivity(axis: Axis, sweeps: Mapping[str, RunSet]) -> list[LrSensitivity]:
    """The lr sensitivity of every arm of the axis's sweeps with an lr grid
    (`compare.sensitivity`), over the sweeps' trials, each arm named after its sweep."""
    out = []
    for entry in axis.sensitivity:
        runs = sweeps[entry.experiment].runs
        trial = runs.get(f"tags.{TRIAL_NUMBER_TAG}", pd.Series(None, index=runs.index))
        trials = runs[trial.notna()]
        out += [replace(r, arm=f"{entry.experiment}: {r.arm}") for r in lr_sensitivities(trials)]
    return out


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
) -> Document:
    """The report: the findings, a section per axis (its figures by file stem in `stems`, their
    PNGs in `pngs`, inlined in the HTML where given; the lr sensitivity of its tuned arms by
    axis name in `sensitivity`, `axis_sensitivity`), the ladders, the environment and the
    commands; `cost`, the arms' measured cost (`read_cost`), and `manifest`, the path the
    command to measure it names."""
    costs = None if cost is None else cost.by_label(study)
    blocks: list[Block] = [
        Paragraph(study.description),
        Heading(2, "Findings"),
        Paragraph(_method_note(study), "caption"),
        Paragraph(cost_note(cost, manifest), "caption"),
        Table(FINDING_HEADERS, finding_rows(study, results), "findings"),
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


def _method_note(study: Study) -> str:
    return (
        f"Each axis is one family: its comparisons' p-values are {study.correction}-corrected "
        f"together and each interval is at the level of its correction step (it excludes 0 exactly "
        f"when the corrected p-value is below 0.05); Δ is arm − reference "
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
        f"waits for; its repeated interval holds the error across looks. An A/A row compares an "
        f"arm with itself on disjoint seeds, the study's calibration: it must find no "
        f"difference."
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
) -> Path:
    """Write the report into `folder` (made if missing) and return its `index.html`; the arms'
    cost comes from the cost.csv `minimind study bench {manifest}` wrote, in `folder` or else
    in the manifest's `report_dir` (a report re-rendered elsewhere reads the committed one),
    never another study's."""
    folder.mkdir(parents=True, exist_ok=True)
    tables = (read_cost(d / COST_FILE) for d in (folder, study.report_dir))  # lazily: one read
    cost = next(
        (t for t in tables if t is not None and t.environment.get("study") == study.name), None
    )
    pngs: dict[str, bytes] = {}
    stems: dict[str, list[str]] = {}
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
    (folder / "findings.csv").write_text(findings_csv(study, results), encoding="utf-8")
    runs = pd.concat([r.comparison.runs.assign(axis=r.axis.name) for r in results])
    runs.to_csv(folder / "runs.csv", index=False, encoding="utf-8")
    sensitivity = {r.axis.name: axis_sensitivity(r.axis, sweeps) for r in results}
    page = document(study, results, pngs, stems, env, cost, manifest, ladders, sensitivity)
    (folder / "report.md").write_text(page.markdown(), encoding="utf-8")
    index = folder / "index.html"
    index.write_text(page.html(), encoding="utf-8")
    print(f"Study report written to {index}", file=sys.stderr)
    return index
