"""A ladder's report: `index.html` (the ladder section, its figure inlined, each rung's table),
`report.md`, `ladder.csv`, `ladder.png`, and each rung's usual report in `rung-<name>/`
(`report.write_report`); logged to the parent run when the runs come from one invocation."""

from __future__ import annotations

import base64
import html
from pathlib import Path

import matplotlib.pyplot as plt

from minimind.compare import ladder_render, render
from minimind.compare.ladder import Ladder
from minimind.compare.ladder_plots import ladder_figure
from minimind.compare.report import (
    comparison_html,
    log_to_parent_run,
    page_top,
    runset_fields,
    write_report,
)

FIGURE_CAPTION = (
    "Left: each arm's final objective against its training compute, seeds as points, the law "
    "fitted to all its seeds (dashed past the top rung, to the extrapolation). Right: each "
    "comparison's compute multiplier at each rung with its interval (open triangles: bounds, "
    "where a seed ends beyond the baseline's curve or before it), and the multiplier "
    "extrapolated from the fits (square)."
)


def rung_folder(name: str) -> str:
    return f"rung-{name}"


def section_html(ladder: Ladder) -> str:
    """`ladder_render.ladder_section` in HTML: its text as captions, its tables scrolling."""
    section = ladder_render.ladder_section(
        ladder, lambda h, r: f'<div class="scroll">{render.html_table(h, r, "ladder")}</div>'
    )
    return "".join(
        part if part.startswith("<div") else f'<p class="caption">{html.escape(part)}</p>'
        for part in section
        if part
    )


def to_html(ladder: Ladder, png: bytes, fields: dict[str, str]) -> str:
    title = f"minimind compare (ladder): {', '.join(ladder.runset.experiments)}"
    meta = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in fields.items())
    ladder_html = section_html(ladder)
    rungs = "".join(
        f"<h3>Rung {html.escape(r.name)}: {render.fmt_count(r.params)} params, "
        f"{ladder_render.fmt_compute(r.compute, ladder.compute_unit)} "
        f'(<a href="{rung_folder(r.name)}/index.html">its report</a>)</h3>'
        f'<p class="caption">{html.escape(render.caption(r.comparison))}</p>'
        f"{comparison_html(r.comparison)}"
        for r in ladder.rungs
    )
    image = base64.b64encode(png).decode("ascii")
    return f"""{page_top(title, meta)}
<h2>Ladder</h2>
{ladder_html}
<figure id="fig-ladder"><img alt="ladder" src="data:image/png;base64,{image}">
<figcaption>{html.escape(FIGURE_CAPTION)}</figcaption></figure>
<h2>Rung by rung</h2>
{rungs}
</body></html>
"""


def to_markdown(ladder: Ladder, fields: dict[str, str]) -> str:
    meta = "\n".join(f"- **{k}**: {v}" for k, v in fields.items())
    links = ", ".join(f"[{r.name}]({rung_folder(r.name)}/report.md)" for r in ladder.rungs)
    return (
        f"# minimind compare (ladder): {', '.join(ladder.runset.experiments)}\n\n{meta}\n\n"
        f"![ladder](ladder.png)\n\n*{FIGURE_CAPTION}*\n\n"
        f"Each rung's report: {links}.\n\n{ladder_render.to_markdown(ladder, show_noise=True)}"
    )


def write_ladder_report(ladder: Ladder, folder: str | Path, log_to_parent: bool = True) -> Path:
    """Write the report into `folder`; the path of its `index.html`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for rung in ladder.rungs:
        write_report(rung.comparison, folder / rung_folder(rung.name), log_to_parent=False)
    fig = ladder_figure(ladder)
    figure = folder / "ladder.png"
    fig.savefig(figure, dpi=110)
    plt.close(fig)
    (folder / "ladder.csv").write_text(ladder_render.to_csv(ladder))
    fields = runset_fields(ladder.runset)  # once, so that both files give the same time
    (folder / "report.md").write_text(to_markdown(ladder, fields))
    index = folder / "index.html"
    index.write_text(to_html(ladder, figure.read_bytes(), fields), encoding="utf-8")
    if log_to_parent:
        log_to_parent_run(ladder.runset, folder)
    return index
