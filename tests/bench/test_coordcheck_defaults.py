"""`minimind coordcheck`'s defaults: one constant each, read by the parser."""

from __future__ import annotations

import pytest

from minimind.cli import build_parser


def test_the_default_widths_are_one_constant_the_parser_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("minimind.commands.coordcheck.DEFAULT_WIDTHS", (16, 48))
    args = build_parser().parse_args(["coordcheck", "spec.yaml"])
    assert args.widths == [16, 48]
