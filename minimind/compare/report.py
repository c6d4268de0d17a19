"""The comparison report: a self-contained `index.html` (figures inlined as base64 PNG),
`report.md`, `comparison.csv`, `runs.csv` and the PNGs, also logged to the parent run."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from mlflow.exceptions import MlflowException

from minimind.compare import plots, render
from minimind.compare.domains import (
    DOMAIN_HEADERS,
    DomainSuite,
    domain_figure,
    domain_note,
    domain_rows,
)
from minimind.compare.environment import environment_blocks
from minimind.compare.probe_plots import FIGURE_CAPTIONS as PROBE_CAPTIONS
from minimind.compare.probe_plots import probe_figures
from minimind.compare.runs import RunSet
from minimind.compare.sensitivity import (
    LrSensitivity,
    lr_sensitivities,
    sensitivity_blocks,
    sensitivity_figure,
)
from minimind.compare.table import Comparison
from minimind.foundations.atomic_file import atomic_open, atomic_write_text
from minimind.foundations.document import (
    Block,
    Details,
    Document,
    Fields,
    Figure,
    Heading,
    Paragraph,
    Preformatted,
    Table,
)
from minimind.record import DEVICE_TAG, GIT_COMMIT_TAG, GPU_NAME_TAG, PLAN_HASH_TAG, PRECISION_TAG

ARTIFACT_PATH = "comparison"

FIGURE_CAPTIONS = {
    "curves_train_loss": "Training loss against step, tokens seen and wall-clock time.",
    "curves_val_bpb": "Validation bits per byte against step, tokens seen and wall-clock time.",
    "final": "Final objective per variant with the seed spread.",
    "pareto": "Throughput against the objective: points on the dashed line are not beaten on both.",
    "moe_load": "Expert load imbalance of the MoE layers over training.",
    "domains": "Δ bits per byte by held-out domain against the baseline, with its interval.",
    "lr_sensitivity": "Final validation loss against the lr, per arm with an lr grid.",
    **PROBE_CAPTIONS,
}

OWN_SECTION = ("domains", "lr_sensitivity")
"""The figures shown in their own section, not under "Figures"."""

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2rem auto;
       max-width: 1500px; padding: 0 1rem; color: #1f2328; }
h1 { margin-bottom: .2rem; } h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .3rem; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: .2rem 1rem; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; font-family: ui-monospace, monospace; }
div.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: .8rem; margin: .5rem 0 1rem; }
th, td { border: 1px solid #d0d7de; padding: .2rem .45rem; text-align: right; white-space: nowrap; }
th { background: #f6f8fa; white-space: normal; }
td:first-child, th:first-child { text-align: left; }
table.problems td, table.problems th { text-align: left; white-space: normal; }
tr.better td.verdict { color: #1a7f37; font-weight: 600; }
tr.worse td.verdict { color: #cf222e; font-weight: 600; }
tr.within-noise td.verdict { color: #656d76; }
span.ci { color: #656d76; font-size: .75rem; }
figure { margin: 1rem 0 2rem; } figure img { max-width: 100%; border: 1px solid #d0d7de; }
figcaption { color: #656d76; font-size: .9rem; } p.caption { color: #424a53; }
details pre { background: #f6f8fa; padding: .8rem; overflow-x: auto; font-size: .85rem; }
"""


def _unique(df: pd.DataFrame, column: str) -> list[str]:
    if column not in df.columns:
        return []
    return sorted({str(v) for v in df[column].dropna() if str(v)})


def devices(runs: pd.DataFrame) -> str:
    """The devices the runs trained on, from their device tags: `cpu`, or `cuda (<GPU name>)`."""
    labels = set()
    for _, run in runs.iterrows():
        device, gpu = run.get(f"tags.{DEVICE_TAG}"), run.get(f"tags.{GPU_NAME_TAG}")
        if isinstance(device, str) and device:
            labels.add(f"{device} ({gpu})" if isinstance(gpu, str) and gpu else device)
    return ", ".join(sorted(labels)) or "unknown"


def header_fields(comparison: Comparison) -> dict[str, str]:
    """What was compared: spec, spec hash, git commit, device and precision (as the runs
    recorded them), dates, store and selection."""
    return runset_fields(comparison.runset)


def runset_fields(runset: RunSet) -> dict[str, str]:
    """`header_fields` of the runs of `runset`."""
    runs, parents = runset.runs, runset.parents
    both = pd.concat([parents, runs], ignore_index=True)

    def first_of(*columns: str) -> str:
        for column in columns:
            for df in (parents, runs):
                values = _unique(df, column)
                if values:
                    return ", ".join(values)
        return "unknown"

    starts = pd.to_datetime(both["start_time"], utc=True).dropna()
    ends = pd.to_datetime(both.get("end_time", pd.Series(dtype=object)), utc=True).dropna()
    fmt = "%Y-%m-%d %H:%M UTC"
    dates = f"{starts.min():{fmt}} to {ends.max() if len(ends) else starts.max():{fmt}}"
    fields = {
        "experiment": ", ".join(runset.experiments),
        "spec": first_of("params.name"),
        "description": first_of("params.description"),
        "spec hash": first_of(f"tags.{PLAN_HASH_TAG}"),
        "git commit": first_of(f"tags.{GIT_COMMIT_TAG}"),
        "device": devices(runs),
        "precision": ", ".join(_unique(runs, f"tags.{PRECISION_TAG}")) or "unknown",
        "dates": dates,
        "runs": runset.selection,
        "tracking URI": runset.store,
        "generated": datetime.now(timezone.utc).strftime(fmt),
    }
    if fields["description"] == "unknown":  # optional in a spec; the others always exist
        del fields["description"]
    return fields


def common_params(comparison: Comparison) -> dict[str, str]:
    """The params every run shares: the resolved spec, less what the variants change."""
    runs = comparison.runset.runs
    out = {}
    for column in sorted(c for c in runs.columns if c.startswith("params.")):
        values = runs[column].dropna().unique()
        if len(values) == 1 and runs[column].notna().all():
            out[column.removeprefix("params.")] = str(values[0])
    return out


def _runs_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    m = comparison.metric
    headers = ["run", "seed", "status", m, "val/loss", "tok/s", "wall", "run id"]
    rows = [
        [
            str(r["run_name"]),
            render.MISSING if pd.isna(r["seed"]) else str(int(r["seed"])),
            str(r["status"]),
            render.MISSING if pd.isna(r[m]) else f"{r[m]:.4f}",
            render.MISSING if pd.isna(r["val/loss"]) else f"{r['val/loss']:.4f}",
            render.fmt_count(r["perf/tokens_per_s"]),
            render.fmt_seconds(r["wall_s"]),
            str(r["run_id"]),
        ]
        for _, r in comparison.runs.sort_values(["group", "seed"]).iterrows()
    ]
    return headers, rows


def domain_blocks(suite: DomainSuite, png: bytes | None) -> list[Block]:
    """The per-domain section: Δ per domain and arm with its interval and corrected p, each
    domain's SNR, the SNR of every suite metric, and the figure of Δ by domain (`png`)."""
    snr_rows = [[m, f"{ratio:.3g}", f"{sd:.3g}"] for m, (ratio, sd) in suite.snr.items()]
    blocks: list[Block] = [
        Heading(2, "Per domain"),
        Table(DOMAIN_HEADERS, domain_rows(suite.table, suite.snr)),
        Paragraph(domain_note(suite.table)),
        Table(["metric", "SNR", "seed-to-seed sd"], snr_rows),
        Paragraph(
            "SNR: the spread of the arms' means over the seed-to-seed sd (Heineman et al. 2025)."
        ),
    ]
    if png is not None:
        blocks.append(Figure("domains.png", FIGURE_CAPTIONS["domains"], png, anchor="fig-domains"))
    return blocks


def document(
    comparison: Comparison,
    pngs: dict[str, bytes],
    fields: dict[str, str],
    suite: DomainSuite | None = None,
    sensitivity: list[LrSensitivity] | None = None,
) -> Document:
    """The report: header (`fields`, from `header_fields`), table, failed runs, the held-out
    suite per domain (`suite`, when the runs log one; its figure is `pngs["domains"]`), the lr
    sensitivity of the arms with an lr grid (`sensitivity`, `lr_sensitivities`; its figure is
    `pngs["lr_sensitivity"]`), figures (`pngs`, by file stem, inlined in the HTML), runs, the
    environment they trained in (`environment_blocks`), the spec the runs share."""
    if len(comparison.problems):
        problems: Block = render.problem_table(comparison)
    else:
        problems = Paragraph("None: every run finished and logged the objective.")
    shared = common_params(comparison)
    spec = "\n".join(f"{k}: {v}" for k, v in shared.items())
    blocks: list[Block] = [
        Fields(fields),
        Heading(2, "Comparison"),
        *render.comparison_blocks(comparison, show_noise=True, split=True),
        Heading(2, "Failed or incomplete runs"),
        problems,
        *(domain_blocks(suite, pngs.get("domains")) if suite is not None else []),
        *sensitivity_blocks(sensitivity or [], pngs.get("lr_sensitivity")),
        Heading(2, "Figures"),
        *(
            Figure(f"{name}.png", FIGURE_CAPTIONS.get(name, name), png, anchor=f"fig-{name}")
            for name, png in pngs.items()
            if name not in OWN_SECTION
        ),
        Heading(2, "Runs"),
        Table(*_runs_rows(comparison), "runs"),
        *environment_blocks(comparison.runset.runs),
        Heading(2, "Spec"),
        Details(f"Params shared by every run ({len(shared)})", [Preformatted(spec)]),
    ]
    return Document(f"minimind compare: {', '.join(comparison.runset.experiments)}", blocks, CSS)


def write_report(
    comparison: Comparison,
    folder: str | Path,
    log_to_parent: bool = True,
    suite: DomainSuite | None = None,
) -> Path:
    """Write the report into `folder` and return the path of its `index.html`; with `suite`
    (`compare.domains.domain_suite`), its per-domain section and `domains.png`; where the runs
    include an lr grid for an arm (`compare.sensitivity`), its section and `lr_sensitivity.png`.

    With `log_to_parent`, the files are also logged as artifacts (under `comparison/`) of the
    parent run, when the runs come from exactly one invocation.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pngs: dict[str, bytes] = {}
    figures = plots.draw_all(comparison) | probe_figures(comparison)
    if suite is not None and len(suite.table):
        figures["domains"] = domain_figure(suite.table)
    sensitivity = lr_sensitivities(comparison.runset.runs)
    if sensitivity:
        figures["lr_sensitivity"] = sensitivity_figure(sensitivity)
    for name, fig in figures.items():
        # Written atomically (a link planted at a report's path is replaced, never followed).
        with atomic_open(folder / f"{name}.png") as f:
            fig.savefig(f, format="png", dpi=110)
        plt.close(fig)
        pngs[name] = (folder / f"{name}.png").read_bytes()
    atomic_write_text(folder / "comparison.csv", render.to_csv(comparison))
    atomic_write_text(folder / "runs.csv", render.runs_csv(comparison))
    page = document(comparison, pngs, header_fields(comparison), suite, sensitivity)
    atomic_write_text(folder / "report.md", page.markdown())
    index = folder / "index.html"
    atomic_write_text(index, page.html())
    if log_to_parent:
        log_to_parent_run(comparison.runset, folder)
    return index


def log_to_parent_run(runset: RunSet, folder: Path) -> None:
    """Log the report in `folder` as artifacts (under `comparison/`) of the parent run, when
    the runs come from exactly one invocation; a failure is a warning."""
    parents = runset.parents
    if len(parents) != 1:
        return
    run_id = parents["run_id"].iloc[0]
    try:
        runset.client.log_artifacts(run_id, str(folder), ARTIFACT_PATH)
    except (MlflowException, OSError) as e:
        print(f"compare: could not log the report to parent run {run_id}: {e}", file=sys.stderr)
