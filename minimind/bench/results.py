"""Benchmark figures, their targets, the machine they were measured on, and how they are shown.

A `Row` is one figure (a ratio, a rate, a share); its target, when the issue sets one, is shown
beside it and checked (`met`), never asserted: a missed target is a finding, not a failure.
"""

from __future__ import annotations

import json
import math
import operator
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from rich.console import Console
from rich.table import Table

from minimind.foundations.atomic_file import atomic_write_text

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "<": operator.lt,
}

# CPU flags that decide which precisions run fast (bf16 autocast needs avx512_bf16 or AMX).
_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8")


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


def machine_info(device: torch.device) -> dict[str, Any]:
    """CPU model and the flags that matter, core count, library versions, GPU name."""
    model, flags = _cpu_model_and_flags()
    info: dict[str, Any] = {
        "cpu": model,
        "cpu_flags": [flag for flag in _CPU_FLAGS if flag in flags],
        "cpu_count": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],  # other processes competing for the cores
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    return info


def _cpu_model_and_flags() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set[str]()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return model, flags
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            break
    return model, flags
