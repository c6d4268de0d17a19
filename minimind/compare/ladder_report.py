"""A ladder's report: `index.html` (the ladder section, its figure inlined, the decision
agreement, the environment, each rung's table), `report.md`, `ladder.csv`,
`decision_agreement.csv`, `ladder.png`, and each rung's usual report in `rung-<name>/`
(`report.write_report`); logged to the parent run when the runs come from one invocation."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from minimind.compare import ladder_render
from minimind.compare.agreement import agreement_blocks, decision_agreement
from minimind.compare.agreement import to_csv as agreement_csv
from minimind.compare.environment import environment_blocks
from minimind.compare.ladder import Ladder, Rung
from minimind.compare.ladder_plots import ladder_figure
from minimind.compare.report import CSS, log_to_parent_run, runset_fields, write_report
from minimind.foundations.atomic_file import atomic_write_text
from minimind.foundations.document import Block, Document, Fields, Figure, Heading, Link, Text

FIGURE_CAPTION = (
    "Left: each arm's final objective against its training compute, seeds as points, the law "
    "fitted to all its seeds (dashed past the top rung, to the extrapolation). Right: each "
    "comparison's compute multiplier at each rung with its interval (open triangles: bounds, "
    "where a seed ends beyond the baseline's curve or before it), and the multiplier "
    "extrapolated from the fits (square)."
)


def rung_folder(name: str) -> str:
    return f"rung-{name}"


def document(
    ladder: Ladder, png: bytes, fields: dict[str, str], agreement: pd.DataFrame
) -> Document:
    """The report: header (`fields`), the ladder section and its figure, the decision
    agreement (`agreement`, `decision_agreement`'s table), the environment, then each rung's
    comparison with a link to its own report."""

    def title(rung: Rung) -> Text:
        folder = rung_folder(rung.name)
        own = Link("its report", f"{folder}/index.html", f"{folder}/report.md")
        return [ladder_render.rung_title(ladder, rung), " (", own, ")"]

    blocks: list[Block] = [
        Fields(fields),
        Heading(2, "Ladder"),
        *ladder_render.ladder_section(ladder),
        Figure("ladder.png", FIGURE_CAPTION, png, anchor="fig-ladder"),
        *agreement_blocks(agreement, ladder.baseline),
        *environment_blocks(ladder.runset.runs),
        Heading(2, "Rung by rung"),
        *ladder_render.rung_blocks(ladder, title, show_noise=True, split=True),
    ]
    experiments = ", ".join(ladder.runset.experiments)
    return Document(f"minimind compare (ladder): {experiments}", blocks, CSS)


def write_ladder_report(
    ladder: Ladder,
    folder: str | Path,
    log_to_parent: bool = True,
    agreement: pd.DataFrame | None = None,
) -> Path:
    """Write the report into `folder`; the path of its `index.html`. `agreement`:
    `decision_agreement`'s table (made here when not given)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for rung in ladder.rungs:
        write_report(rung.comparison, folder / rung_folder(rung.name), log_to_parent=False)
    fig = ladder_figure(ladder)
    figure = folder / "ladder.png"
    fig.savefig(figure, dpi=110)
    plt.close(fig)
    (folder / "ladder.csv").write_text(ladder_render.to_csv(ladder))
    agreement = decision_agreement(ladder) if agreement is None else agreement
    atomic_write_text(folder / "decision_agreement.csv", agreement_csv(agreement))
    page = document(ladder, figure.read_bytes(), runset_fields(ladder.runset), agreement)
    (folder / "report.md").write_text(page.markdown(), encoding="utf-8")
    index = folder / "index.html"
    index.write_text(page.html(), encoding="utf-8")
    if log_to_parent:
        log_to_parent_run(ladder.runset, folder)
    return index
