"""Plain-text tables, for terminals that are not one and for files: the `--dry-run` plan and
`minimind compare`'s table when its output is piped."""

from __future__ import annotations

from collections.abc import Sequence


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns left-aligned and two spaces apart, a dashed rule under the header."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])
