"""The report document model: each node's HTML read back by an HTML parser has the node's
structure and the original text, whatever characters it holds; markdown tables keep their
cells; blocks stand a blank line apart."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

from minimind.foundations.document import (
    BulletList,
    Cell,
    Details,
    Document,
    Fields,
    Figure,
    Heading,
    Link,
    Paragraph,
    Preformatted,
    Small,
    Strong,
    Table,
    to_html,
    to_markdown,
    to_plain,
)

HOSTILE = "a < b > c & \"d\" 'e' | f </td><script>alert(1)</script>"
VOID = {"br", "img", "meta"}

Node = tuple[str, dict[str, str | None], list]  # (tag, attributes, children: nodes and strings)


class _Tree(HTMLParser):
    """The element tree of an HTML fragment, text unescaped (the parser's own reading)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root: Node = ("root", {}, [])
        self.open: list[Node] = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node: Node = (tag, dict(attrs), [])
        self.open[-1][2].append(node)
        if tag not in VOID:
            self.open.append(node)

    def handle_endtag(self, tag: str) -> None:
        assert self.open[-1][0] == tag, f"</{tag}> closes <{self.open[-1][0]}>"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        if not data.strip():  # the line breaks between blocks
            return
        children = self.open[-1][2]
        if children and isinstance(children[-1], str):
            children[-1] += data
        else:
            children.append(data)


def parse(fragment: str) -> list:
    tree = _Tree()
    tree.feed(fragment)
    tree.close()
    assert tree.open == [tree.root], "an element is left open"
    return tree.root[2]


def text(node: Node | str) -> str:
    return node if isinstance(node, str) else "".join(text(c) for c in node[2])


def test_text_is_escaped_in_every_node_and_reads_back_whole() -> None:
    (heading,) = parse(Heading(2, HOSTILE, anchor='x" onclick="y').html())
    assert heading == ("h2", {"id": 'x" onclick="y'}, [HOSTILE])
    (paragraph,) = parse(Paragraph([Strong(HOSTILE), HOSTILE, Small(HOSTILE)], "c").html())
    assert paragraph == (
        "p",
        {"class": "c"},
        [("b", {}, [HOSTILE]), HOSTILE, ("small", {}, [HOSTILE])],
    )
    (fields,) = parse(Fields({HOSTILE: HOSTILE}).html())
    assert fields == ("dl", {"class": "meta"}, [("dt", {}, [HOSTILE]), ("dd", {}, [HOSTILE])])
    (link,) = parse(Link(HOSTILE, 'a b"c.html').html())
    assert link == ("a", {"href": 'a b"c.html'}, [HOSTILE])
    (pre,) = parse(Preformatted(HOSTILE + "\n  indented").html())
    assert pre == ("pre", {}, [HOSTILE + "\n  indented"])


def test_a_table_is_its_headers_and_cells_with_their_classes() -> None:
    table = Table(
        ["arm", HOSTILE],
        [["a", Cell("+0.1", "[0.0, 0.2]", "better")], [HOSTILE, Cell(HOSTILE)]],
        "comparison cost",
        row_css=["better", ""],
    )
    (div,) = parse(table.html())
    assert div[:2] == ("div", {"class": "scroll"})
    ((tag, attributes, (head, body)),) = div[2]
    assert (tag, attributes) == ("table", {"class": "comparison cost"})
    assert head == ("thead", {}, [("tr", {}, [("th", {}, ["arm"]), ("th", {}, [HOSTILE])])])
    first, second = body[2]
    assert first == (
        "tr",
        {"class": "better"},
        [
            ("td", {}, ["a"]),
            ("td", {"class": "better"}, ["+0.1", ("br", {}, []), ("span", {"class": "ci"}, ["[0.0, 0.2]"])]),
        ],
    )  # fmt: skip
    assert second == ("tr", {}, [("td", {}, [HOSTILE]), ("td", {}, [HOSTILE])])


def _markdown_cells(line: str) -> list[str]:
    """A markdown table row's cells, as a renderer splits it: at each pipe not escaped."""
    assert line.startswith("| ") and line.endswith(" |")
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line[2:-2])]


def test_markdown_cells_keep_their_pipes_and_lines() -> None:
    table = Table(["a|b", "c"], [["x | y", Cell("1\n2", "[0 | 3]")]])
    header, rule, row = table.markdown().splitlines()
    assert _markdown_cells(header) == ["a|b", "c"] and rule == "|---|---|"
    assert _markdown_cells(row) == ["x | y", "1 2 [0 | 3]"]
    plain = table.plain().splitlines()
    assert plain[0].split() == ["a|b", "c"] and plain[2].startswith("x | y  1")


def test_details_nest_in_html_and_in_markdown() -> None:
    inner = Details(HOSTILE, [Paragraph("deep"), Table(["h"], [["v"]])])
    outer = Details("outer", [Paragraph("shallow"), inner])
    (tree,) = parse(outer.html())
    assert tree[0] == "details" and tree[2][0] == ("summary", {}, ["outer"])
    nested = tree[2][2]
    assert nested[0] == "details" and nested[2][0] == ("summary", {}, [HOSTILE])
    assert nested[2][1] == ("p", {}, ["deep"]) and nested[2][2][0] == "div"
    markdown = outer.markdown()
    assert markdown.count("<details>") == 2 and markdown.count("</details>") == 2
    # the markdown inside each element stands a blank line from the tags, or it is not read
    assert "<summary>outer</summary>\n\nshallow\n\n<details>" in markdown
    assert "| h |\n|---|\n| v |\n\n</details>\n\n</details>" in markdown
    assert "&lt;script&gt;" in markdown and "<script>" not in markdown


def test_figure_paths_are_urls_and_inlined_data_reads_back() -> None:
    png = b"\x89PNG\r\n\x1a\n fake"
    linked = Figure("plots/a b (1).png", caption="Loss & <bpb>")
    assert linked.markdown() == "![a b (1)](plots/a%20b%20%281%29.png)\n\n*Loss & <bpb>*"
    (figure,) = parse(linked.html())
    img, caption = figure[2]
    assert img == ("img", {"alt": "a b (1)", "src": "plots/a%20b%20%281%29.png"}, [])
    assert caption == ("figcaption", {}, ["Loss & <bpb>"])
    (inlined,) = parse(Figure("x.png", data=png, anchor="fig-x").html())
    assert inlined[:2] == ("figure", {"id": "fig-x"}) and len(inlined[2]) == 1  # no caption
    source = inlined[2][0][1]["src"]
    assert base64.b64decode(source.removeprefix("data:image/png;base64,")) == png
    assert Figure("x.png", data=png).markdown() == "![x](x.png)"


def test_links_lists_and_code_in_markdown() -> None:
    assert (
        Link("its report", "r/index.html", "r/report.md").markdown() == "[its report](r/report.md)"
    )
    assert Link("row", "#ladder-0").markdown() == "row"  # no stable ids in markdown
    items = BulletList([[Strong("agrees"), ": x"], [Link("row", "#ladder-0")]], "expected")
    assert items.markdown() == "- **agrees**: x\n- row"
    (ul,) = parse(items.html())
    assert ul[1] == {"class": "expected"}
    assert ul[2][1] == ("li", {}, [("a", {"href": "#ladder-0"}, ["row"])])
    fenced = Preformatted("a\n```\nb").markdown()
    assert fenced.startswith("````\n") and fenced.endswith("\n````")


def test_blocks_stand_a_blank_line_apart() -> None:
    """A markdown table right under a line of text is read as part of that paragraph."""
    blocks = [Paragraph("a vs b, rung by rung:"), Table(["x"], [["1"]]), Paragraph("end")]
    assert to_markdown(blocks) == "a vs b, rung by rung:\n\n| x |\n|---|\n| 1 |\n\nend"
    assert to_plain(blocks).startswith("a vs b, rung by rung:\n\nx\n-\n1\n\nend")
    assert [node[0] for node in parse(to_html(blocks))] == ["p", "div", "p"]


def test_a_document_is_a_page_whose_structure_is_its_blocks() -> None:
    page = Document(HOSTILE, [Fields({"k": "v"}), Heading(2, "S"), Paragraph("p")], css="p {}")
    html = page.html()
    assert html.startswith("<!DOCTYPE html>")
    body = re.search(r"<body>(.*)</body>", html, re.S)
    assert body is not None
    assert [(n[0], text(n)) for n in parse(body.group(1))] == [
        ("h1", HOSTILE),
        ("dl", "kv"),
        ("h2", "S"),
        ("p", "p"),
    ]
    title = re.search(r"<title>(.*)</title>", html)
    assert title is not None and parse(f"<t>{title.group(1)}</t>") == [("t", {}, [HOSTILE])]
    assert page.markdown() == f"# {HOSTILE}\n\n- **k**: v\n\n## S\n\np\n"
