"""`minimind bench`: figures measured side by side in one process, with their targets.

    from minimind.bench import BenchContext, run_suites
    report = run_suites(["moe"], BenchContext(torch.device("cpu"), rounds=5))
    report.print(); report.write_json("bench.json")

Each suite is a module with `run(ctx) -> list[Row]`: model (MiniMindLM vs HF Llama training
step), moe (MoE layer vs HF Mixtral block), overhead (Trainer.fit vs a bare loop), generate
(KV cache vs none), data (BPE, tokenization, batch sampling) and mfu (FLOP/s vs matmul peak).
Timing rules live in `minimind.training.timing`, memory in `minimind.training.memory`.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minimind.bench.context import BenchContext
    from minimind.bench.results import Report, Row, Target

SUITES = ("model", "moe", "overhead", "generate", "data", "mfu")
# The modules of a suite made of several, each with `run(ctx) -> list[Row]` (the training loop's
# overhead and the probes' overhead time the same loop); any other suite is its own module.
SUITE_MODULES = {"overhead": ("overhead", "probe_overhead")}


def run_suites(names: Sequence[str], ctx: BenchContext) -> Report:
    """Run the named suites in order with torch's intra-op threads as they are set now.

    A suite that raises is recorded in `report.failures` (with its traceback printed through
    `ctx.log`) and the others still run.
    """
    import torch

    from minimind.bench.results import Report
    from minimind.training.machine import machine_info

    unknown = sorted(set(names) - set(SUITES))
    if unknown:
        raise ValueError(f"unknown suite(s) {unknown}; choices: {', '.join(SUITES)}")
    settings = {
        "device": str(ctx.device),
        "threads": torch.get_num_threads(),
        "rounds": ctx.rounds,
        "warmup": ctx.warmup,
        "quick": ctx.quick,
        "suites": list(names),
    }
    report = Report(machine_info(ctx.device), settings)
    for name in names:
        for module in SUITE_MODULES.get(name, (name,)):
            try:
                suite = importlib.import_module(f"minimind.bench.{module}")
                report.rows.extend(suite.run(ctx))
            except Exception as exc:  # one broken suite must not hide the others' figures
                ctx.log(traceback.format_exc())
                report.failures[module] = f"{type(exc).__name__}: {exc}"
    return report


__all__ = ["SUITES", "BenchContext", "Report", "Row", "Target", "run_suites"]

# Imported on first use: `SUITES` alone (the CLI's `--suite` choices) must not import torch.
_HOMES = {
    "BenchContext": "minimind.bench.context",
    "Report": "minimind.bench.results",
    "Row": "minimind.bench.results",
    "Target": "minimind.bench.results",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'minimind.bench' has no attribute {name!r}")
