"""Benchmark figures, their targets, the machine they were measured on, and how they are shown.

A `Row` is one figure (a ratio, a rate, a share); its target, when the issue sets one, is shown
beside it and checked (`met`), never asserted: a missed target is a finding, not a failure.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from minimind.foundations.atomic_file import atomic_write_text

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "<": operator.lt,
}


@dataclass(frozen=True)
class Target:
    """`value <op> bound`, e.g. Target(">=", 1.0) for "at least as fast"."""

    op: Literal[">=", "<=", "<"]
    bound: float

    def met(self, value: float) -> bool:
        return math.isfinite(value) and _OPERATORS[self.op](value, self.bound)

    def __str__(self) -> str:
        return f"{self.op} {self.bound:g}"


@dataclass(frozen=True)
class Row:
    """One figure: `value` in `unit` ("x" for ratios), with the absolute figures in `detail`."""

    suite: str
    case: str
    value: float
    unit: str
    target: Target | None = None
    detail: str = ""

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.target.met(self.value)

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "case": self.case,
            "value": self.value,
            "unit": self.unit,
            "target": str(self.target) if self.target else None,
            "met": self.met,
            "detail": self.detail,
        }


@dataclass
class Report:
    machine: dict[str, Any]
    settings: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # suite -> error

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "settings": self.settings,
            "rows": [row.to_json() for row in self.rows],
            "failures": self.failures,
        }

    def write_json(self, path: str | Path) -> None:
        atomic_write_text(path, json.dumps(self.to_json(), indent=2) + "\n")

    def print(self, console: Console | None = None) -> None:
        if console is None:
            console = Console()
            if not console.is_terminal:  # piped: wide rows rather than wrapped cells
                console = Console(width=200)
        console.print(_machine_line(self.machine, self.settings))
        table = Table(show_lines=False)
        for column, justify in (
            ("suite", "left"),
            ("case", "left"),
            ("value", "right"),
            ("target", "right"),
            ("met", "center"),
            ("detail", "left"),
        ):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for row in self.rows:
            met = {None: "", True: "[green]yes[/]", False: "[red]no[/]"}[row.met]
            table.add_row(
                row.suite,
                row.case,
                format_value(row.value, row.unit),
                str(row.target or ""),
                met,
                row.detail,
            )
        console.print(table)
        for suite, error in self.failures.items():
            console.print(f"[red]suite {suite} failed:[/] {error}", highlight=False)


def format_value(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.3f}x"
    if unit == "%":
        return f"{value:.2f} %"
    magnitude = abs(value)
    digits = 0 if magnitude >= 100 else 2 if magnitude >= 1 else 4
    return f"{value:,.{digits}f} {unit}"


def _machine_line(machine: dict[str, Any], settings: dict[str, Any]) -> str:
    flags = ", ".join(machine["cpu_flags"]) or "none"
    device = machine.get("gpu") or "no GPU"
    return (
        f"{machine['cpu']} ({machine['cpu_count']} CPUs, load {machine['load_avg_1m']:.1f}; "
        f"{flags}); {device}; torch {machine['torch']}; "
        f"device {settings['device']}, {settings['threads']} threads, "
        f"{settings['rounds']} rounds{' (quick)' if settings['quick'] else ''}"
    )
