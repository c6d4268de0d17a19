"""A report as a tree of blocks that each render to HTML, to markdown and, for a terminal or a
pipe, to plain text: headings, paragraphs, lists, fields, tables of cells, figures,
preformatted text and collapsible details. Text is escaped here and nowhere else (`_html` for
HTML, `_md_cell` for a markdown table's cells), and `Table` is the one table writer."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Protocol
from urllib.parse import quote

from minimind.foundations.plain_table import plain_table


def _html(text: str) -> str:
    """Text in HTML, in an element or an attribute value: <, >, & and both quotes escaped."""
    return html.escape(text, quote=True)


def _md_cell(text: str) -> str:
    """Text in a markdown table cell: a pipe would end the cell and a newline the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def _url(path: str) -> str:
    """A relative path as a URL: spaces, brackets and the like percent-encoded (markdown's
    `](...)` ends at the first `)` or space), the slashes kept."""
    return quote(path, safe="/#")


@dataclass(frozen=True)
class Strong:
    """Bold text in a run of text."""

    text: str

    def html(self) -> str:
        return f"<b>{_html(self.text)}</b>"

    def markdown(self) -> str:
        return f"**{self.text}**"

    def plain(self) -> str:
        return self.text


@dataclass(frozen=True)
class Small:
    """Secondary text in a run of text (a source's citation); plain in markdown."""

    text: str

    def html(self) -> str:
        return f"<small>{_html(self.text)}</small>"

    def markdown(self) -> str:
        return self.text

    def plain(self) -> str:
        return self.text


@dataclass(frozen=True)
class Link:
    """A link in a run of text. `markdown_href` is the markdown page's own target where it
    differs (a sibling report's report.md for its index.html). A link within the page (`#id`)
    is its text alone in markdown, whose renderers each make their own ids from a heading."""

    text: str
    href: str
    markdown_href: str = ""

    def html(self) -> str:
        return f'<a href="{_html(self.href)}">{_html(self.text)}</a>'

    def markdown(self) -> str:
        href = self.markdown_href or self.href
        return self.text if href.startswith("#") else f"[{self.text}]({_url(href)})"

    def plain(self) -> str:
        return self.text


Inline = str | Strong | Small | Link
Text = str | Sequence[Inline]
"""A run of text: a string, or strings and marked-up pieces one after the other."""


def _pieces(text: Text) -> Sequence[Inline]:
    return (text,) if isinstance(text, str) else text


def _inline_html(text: Text) -> str:
    return "".join(_html(p) if isinstance(p, str) else p.html() for p in _pieces(text))


def _inline_markdown(text: Text) -> str:
    return "".join(p if isinstance(p, str) else p.markdown() for p in _pieces(text))


def _inline_plain(text: Text) -> str:
    return "".join(p if isinstance(p, str) else p.plain() for p in _pieces(text))


def _class(css: str) -> str:
    return f' class="{_html(css)}"' if css else ""


class Block(Protocol):
    """A node of the document: it renders itself in each format."""

    def html(self) -> str: ...

    def markdown(self) -> str: ...

    def plain(self) -> str: ...


@dataclass(frozen=True)
class Heading:
    """A section's title at `level` (1 is the page's); `anchor`, its id for links within the
    page."""

    level: int
    text: Text
    anchor: str = ""

    def html(self) -> str:
        anchor = f' id="{_html(self.anchor)}"' if self.anchor else ""
        return f"<h{self.level}{anchor}>{_inline_html(self.text)}</h{self.level}>"

    def markdown(self) -> str:
        return f"{'#' * self.level} {_inline_markdown(self.text)}"

    def plain(self) -> str:
        return f"== {_inline_plain(self.text)} =="


@dataclass(frozen=True)
class Paragraph:
    text: Text
    css: str = ""

    def html(self) -> str:
        return f"<p{_class(self.css)}>{_inline_html(self.text)}</p>"

    def markdown(self) -> str:
        return _inline_markdown(self.text)

    def plain(self) -> str:
        return _inline_plain(self.text)


@dataclass(frozen=True)
class BulletList:
    items: Sequence[Text]
    css: str = ""

    def html(self) -> str:
        items = "".join(f"<li>{_inline_html(item)}</li>" for item in self.items)
        return f"<ul{_class(self.css)}>{items}</ul>"

    def markdown(self) -> str:
        return "\n".join(f"- {_inline_markdown(item)}" for item in self.items)

    def plain(self) -> str:
        return "\n".join(f"- {_inline_plain(item)}" for item in self.items)


@dataclass(frozen=True)
class Fields:
    """Named values (what a report read, and when): a definition list in HTML, a list of bold
    names in markdown."""

    items: Mapping[str, str]

    def html(self) -> str:
        items = "".join(f"<dt>{_html(k)}</dt><dd>{_html(v)}</dd>" for k, v in self.items.items())
        return f'<dl class="meta">{items}</dl>'

    def markdown(self) -> str:
        return "\n".join(f"- **{k}**: {v}" for k, v in self.items.items())

    def plain(self) -> str:
        return "\n".join(f"{k}: {v}" for k, v in self.items.items())


@dataclass(frozen=True)
class Cell:
    """A table cell: its text, an interval shown under it in HTML (after it elsewhere, where a
    table is one line per row), the HTML class that styles it, and a `warning` set under it
    in the warning colour, whatever the cell's own."""

    text: str
    interval: str = ""
    css: str = ""
    warning: str = ""

    def __str__(self) -> str:
        parts = [self.text, self.interval, f"(warning: {self.warning})" if self.warning else ""]
        return " ".join(p for p in parts if p)

    def html(self) -> str:
        under = f'<br><span class="ci">{_html(self.interval)}</span>' if self.interval else ""
        if self.warning:
            under += f'<br><span class="warning">{_html(self.warning)}</span>'
        return f"<td{_class(self.css)}>{_html(self.text)}{under}</td>"


@dataclass(frozen=True)
class Table:
    """A table of cells under a row of headers; `row_css`, each row's HTML class (a verdict's
    colour), empty for none. In HTML it scrolls sideways inside its own box, the page not."""

    headers: Sequence[str]
    rows: Sequence[Sequence[Cell | str]]
    css: str = ""
    row_css: Sequence[str] = ()

    def _cells(self) -> list[list[Cell]]:
        return [[c if isinstance(c, Cell) else Cell(c) for c in row] for row in self.rows]

    def html(self) -> str:
        head = "".join(f"<th>{_html(h)}</th>" for h in self.headers)
        classes = list(self.row_css) or [""] * len(self.rows)
        body = "".join(
            f"<tr{_class(css)}>" + "".join(cell.html() for cell in row) + "</tr>"
            for row, css in zip(self._cells(), classes, strict=True)
        )
        return (
            f'<div class="scroll"><table{_class(self.css)}><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>"
        )

    def markdown(self) -> str:
        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(_md_cell(c) for c in cells) + " |"

        rows = [line([str(c) for c in row]) for row in self._cells()]
        return "\n".join([line(self.headers), "|" + "---|" * len(self.headers), *rows])

    def plain(self) -> str:
        return plain_table(self.headers, [[str(c) for c in row] for row in self._cells()])


@dataclass(frozen=True)
class Figure:
    """An image at `path` (relative to the page) with its caption; with `data`, its PNG bytes,
    the HTML inlines it (a page that needs no other file), markdown links the file."""

    path: str
    caption: str = ""
    data: bytes | None = field(default=None, repr=False)
    anchor: str = ""

    @property
    def alt(self) -> str:
        return PurePosixPath(self.path).stem

    def html(self) -> str:
        anchor = f' id="{_html(self.anchor)}"' if self.anchor else ""
        if self.data is None:
            source = _url(self.path)
        else:
            source = "data:image/png;base64," + base64.b64encode(self.data).decode("ascii")
        caption = f"<figcaption>{_html(self.caption)}</figcaption>" if self.caption else ""
        return (
            f'<figure{anchor}><img alt="{_html(self.alt)}" src="{_html(source)}">{caption}</figure>'
        )

    def markdown(self) -> str:
        image = f"![{self.alt}]({_url(self.path)})"
        return f"{image}\n\n*{self.caption}*" if self.caption else image

    def plain(self) -> str:
        return f"[{self.path}] {self.caption}".rstrip()


@dataclass(frozen=True)
class Preformatted:
    """Text shown as written (commands, a spec): a code block."""

    text: str

    def html(self) -> str:
        return f"<pre>{_html(self.text)}</pre>"

    def markdown(self) -> str:
        fence = "```"
        while fence in self.text:  # a fence the text holds would end the block early
            fence += "`"
        return f"{fence}\n{self.text}\n{fence}"

    def plain(self) -> str:
        return self.text


@dataclass(frozen=True)
class Details:
    """Blocks folded under a summary line, shown on a click (markdown keeps the HTML element,
    which the common renderers honour, around its own markdown)."""

    summary: str
    blocks: Sequence[Block]

    def html(self) -> str:
        return f"<details><summary>{_html(self.summary)}</summary>{to_html(self.blocks)}</details>"

    def markdown(self) -> str:
        inner = to_markdown(self.blocks)
        return f"<details><summary>{_html(self.summary)}</summary>\n\n{inner}\n\n</details>"

    def plain(self) -> str:
        return f"{self.summary}\n\n{to_plain(self.blocks)}"


def to_html(blocks: Sequence[Block]) -> str:
    return "\n".join(b.html() for b in blocks)


def to_markdown(blocks: Sequence[Block]) -> str:
    """The blocks a blank line apart: a table or a list right under a line of text would
    otherwise be read as part of it."""
    return "\n\n".join(b.markdown() for b in blocks)


def to_plain(blocks: Sequence[Block]) -> str:
    return "\n\n".join(b.plain() for b in blocks)


@dataclass(frozen=True)
class Document:
    """A page: its title (the first heading), its blocks, and the style sheet of its HTML."""

    title: str
    blocks: Sequence[Block]
    css: str = ""

    def html(self) -> str:
        return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_html(self.title)}</title><style>{self.css}</style></head>
<body>
{to_html([Heading(1, self.title), *self.blocks])}
</body></html>
"""

    def markdown(self) -> str:
        return to_markdown([Heading(1, self.title), *self.blocks]) + "\n"
