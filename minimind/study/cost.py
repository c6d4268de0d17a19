"""`minimind study bench MANIFEST`: each arm's training cost, measured alone and side by side.

The throughput a study's runs log was measured while the streams shared the cores, which slows
identical configs unequally, so an arm's cost cannot be read from it. Here every arm whose
spec resolves (`arm_specs`) gets the `Trainer` its runs had (its model, optimizer, precision,
batch and sequence length; seed 0), in one process on the study's `threads_per_stream` threads,
and nothing else runs: after a warm-up block, `rounds` rounds each time a block of `steps`
consecutive optimizer steps of every arm, the order rotated round by round
(`minimind.training.timing.interleave`), so that whatever slows the machine in a round slows every
arm of it. Per arm: the median ms/step over the rounds with their range, tokens/s, the ratio to
the study's cost baseline (`Study.cost_baseline_arm`; the median of the per-round ratios), the
training FLOPs per token (the model's and the optimizer's own, as a run's params count them)
and the peak memory of one step (`minimind.training.memory`). Diagnostics are off
(`train.probe_every`): they are the harness's cost, not the arm's, and some arms' specs have
them and others not. Nothing is logged to MLflow.

The figures go to `<report dir>/cost.csv`, written atomically: `# key: value` lines stating the
machine and the settings, then one row per arm (an arm that could not be built has its `note`
and no figures), keyed by the hash of the spec it measured (`spec_hash`). The study report
(`minimind.study.report`) reads it back with `read_cost`, and takes a row only while its arm
still resolves to that spec (`CostTable.by_label`).
"""

from __future__ import annotations

import io
import itertools
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from minimind.foundations.atomic_file import atomic_write_text
from minimind.spec import spec_hash
from minimind.study.analysis import StudyError
from minimind.study.arm_specs import ArmSpec, arm_specs
from minimind.study.manifest import Study
from minimind.study.steps import RunStep

if TYPE_CHECKING:
    import torch

    from minimind.training.trainer import Trainer

COST_FILE = "cost.csv"
COLUMNS = [
    "arm",
    "label",
    "experiment",
    "variant",
    "spec",
    "spec_hash",
    "optimizer",
    "precision",
    "tokens_per_step",
    "params",
    "ms_per_step",
    "ms_per_step_min",
    "ms_per_step_max",
    "tokens_per_s",
    "cost_ratio",
    "flops_per_token",
    "peak_mib",
    "note",
]


@dataclass(frozen=True)
class CostSettings:
    """`rounds` timed rounds of `steps` consecutive steps per arm, after `warmup` blocks."""

    rounds: int
    steps: int
    warmup: int = 1


@dataclass(frozen=True)
class CostTable:
    """A measurement: the machine and settings (`# key: value` lines), a row per arm."""

    environment: dict[str, str]
    arms: pd.DataFrame

    def write(self, path: Path) -> None:
        header = "".join(f"# {key}: {value}\n" for key, value in self.environment.items())
        atomic_write_text(path, header + self.arms.to_csv(index=False))

    def by_label(self, study: Study) -> dict[str, pd.Series]:
        """The measured rows by the labels the manifest gives their arms now, but those of arms
        whose spec resolves here to another than the row measured (its `spec_hash`; a row
        without one predates the key): stale, as after a sweep wrote its best.yaml again. An
        arm that does not resolve here (its best.yaml not on this machine) keeps its row."""
        specs, _ = arm_specs(study)
        current = {key: spec_hash(arm.variant.spec) for key, arm in specs.items()}
        measured = self.arms[self.arms["ms_per_step"].notna()]
        return {
            study.arms[row["arm"]].label: row
            for _, row in measured.iterrows()
            if row["arm"] in study.arms
            and (row["arm"] not in current or row.get("spec_hash") == current[row["arm"]])
        }


def read_cost(path: Path) -> CostTable | None:
    """The table `measure_cost` wrote at `path`; None when there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    lines = text.splitlines(keepends=True)
    header = list(itertools.takewhile(lambda line: line.startswith("# "), lines))
    environment = dict(line[2:].rstrip("\n").partition(": ")[::2] for line in header)
    # the hash as written: read as a number, a hash of digits alone would lose its zeros
    arms = pd.read_csv(io.StringIO("".join(lines[len(header) :])), dtype={"spec_hash": str})
    return CostTable(environment, arms)


def measure_cost(study: Study, settings: CostSettings) -> CostTable:
    """Time every arm of `study` that resolves to a spec (see the module's docstring); raises
    `StudyError` when the cost baseline does not resolve. Progress goes to stderr: a bar on a
    terminal, a line per round elsewhere."""
    import torch

    from minimind.training.machine import machine_info

    specs, notes = arm_specs(study)
    baseline = study.cost_baseline_arm()
    if baseline not in specs:
        raise StudyError(f"cost_baseline: {baseline} cannot be measured: {notes[baseline]}")
    # Arms that take the same runs (an A/A pair and its reference) are timed once, as the
    # first of them in the manifest.
    timed: dict[tuple[RunStep, str], str] = {}
    for key, spec in specs.items():
        timed.setdefault(_candidate(spec), key)
    reference = timed[_candidate(specs[baseline])]
    threads = torch.get_num_threads()
    torch.set_num_threads(study.threads_per_stream)
    try:
        trainers = _build({key: specs[key] for key in timed.values()})
        device = next(iter(trainers.values())).device
        machine = machine_info(device)  # the load once the trainers are built, before timing
        times = _time(trainers, settings, device)
        memory = {key: _peak_mib(trainer) for key, trainer in trainers.items()}
    finally:
        torch.set_num_threads(threads)
    rows = []
    for key, arm in study.arms.items():
        if key in specs:
            same = timed[_candidate(specs[key])]
            figures = (trainers[same], times[same], times[reference], memory[same])
            rows.append(_row(specs[key], *figures))
        else:
            rows.append({"arm": key, "label": arm.label, "note": notes[key]})
    environment = {
        "measured": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "study": study.name,
        "cost baseline": f"{baseline} ({study.arms[baseline].label})",
        "device": str(device) + (f" ({machine['gpu']})" if machine["gpu"] else ""),
        "cpu": f"{machine['cpu']}, {machine['cpu_count']} cores "
        f"({', '.join(machine['cpu_flags']) or 'no listed flags'})",
        "load average (1 min) before timing": f"{machine['load_avg_1m']:.2f}",
        "threads": str(study.threads_per_stream),
        "torch": machine["torch"],
        "python": machine["python"],
        "timing": f"{settings.warmup} warm-up block(s), then {settings.rounds} rounds of "
        f"{settings.steps} consecutive optimizer steps per arm, the arms' order rotated each "
        "round; diagnostics (train.probe_every) off",
    }
    return CostTable(environment, pd.DataFrame(rows, columns=COLUMNS))


def _candidate(spec: ArmSpec) -> tuple[RunStep, str]:
    return spec.command.step, spec.variant.name


def _build(specs: Mapping[str, ArmSpec]) -> dict[str, Trainer]:
    """Each arm's `Trainer`, as its runs built theirs (seed 0), diagnostics off; each distinct
    `data` section prepared once (the runs' token cache, tokenized only where it is missing)."""
    from minimind.data import PreparedData, prepare_data
    from minimind.run.plan import data_key
    from minimind.training.device import resolve_run_device
    from minimind.training.trainer import Trainer

    data: dict[str, PreparedData] = {}
    trainers = {}
    for key, arm in specs.items():
        spec = arm.variant.spec
        model_cfg = spec.model_config_obj()
        train_cfg = spec.train.model_copy(update={"probe_every": None})
        if (data_id := data_key(spec.data)) not in data:
            data[data_id] = prepare_data(spec.data)
        device = resolve_run_device(train_cfg, model_cfg.dim)
        trainers[key] = Trainer(model_cfg, train_cfg, data[data_id], seed=0, device=device)
    return trainers


def _time(
    trainers: Mapping[str, Trainer], settings: CostSettings, device: torch.device
) -> dict[str, list[float]]:
    """Seconds per step of each trainer, one figure per round (`bench.timing.interleave`)."""
    import torch

    from minimind.foundations.progress import display
    from minimind.training.timing import interleave

    print(
        f"study cost: {len(trainers)} arms, {settings.warmup} warm-up block(s) and "
        f"{settings.rounds} rounds of {settings.steps} steps each, "
        f"{torch.get_num_threads()} thread(s)",
        file=sys.stderr,
        flush=True,
    )
    start = time.monotonic()
    with display("arm cost", total=settings.rounds, completed=0) as shown:

        def done(r: int) -> None:
            took = time.monotonic() - start
            shown.report(
                r,
                status=f"{took:.0f} s",
                line=f"study cost: round {r}/{settings.rounds} done ({took:.0f} s)",
            )

        return interleave(
            {key: trainer.step_once for key, trainer in trainers.items()},
            device,
            settings.rounds,
            settings.warmup,
            steps=settings.steps,
            on_round=done,
        )


def _peak_mib(trainer: Trainer) -> float:
    """The peak memory of one more step: parameters, gradients, optimizer state and the step's
    own allocations (`minimind.training.memory`)."""
    from minimind.training.memory import step_peak_mib

    return step_peak_mib(trainer.step_once, trainer.model, trainer.optimizer, trainer.device)


def _row(
    spec: ArmSpec, trainer: Trainer, times: list[float], reference: list[float], peak: float
) -> dict[str, object]:
    """The arm's figures: its seconds per step in each round, the baseline's in the same
    rounds, and its peak MiB."""
    from minimind.training.optim import optimizer_flops_per_token
    from minimind.training.timing import median, paired_ratio

    cfg, model_cfg = trainer.cfg, trainer.model_cfg
    tokens = cfg.tokens_per_step
    optimizer_flops = optimizer_flops_per_token(model_cfg, cfg)
    return {
        "arm": spec.key,
        "label": spec.arm.label,
        "experiment": spec.arm.experiment,
        "variant": spec.variant.name,
        "spec": spec.command.describe(),
        "spec_hash": spec_hash(spec.variant.spec),
        "optimizer": cfg.optimizer.name,
        "precision": cfg.precision,
        "tokens_per_step": tokens,
        "params": model_cfg.num_params(),
        "ms_per_step": 1e3 * median(times),
        "ms_per_step_min": 1e3 * min(times),
        "ms_per_step_max": 1e3 * max(times),
        "tokens_per_s": tokens / median(times),
        "cost_ratio": paired_ratio(times, reference),
        "flops_per_token": model_cfg.flops_per_token(cfg.seq_len) + optimizer_flops,
        "peak_mib": peak,
        "note": "",
    }


def describe_cost(table: CostTable) -> str:
    """The terminal's summary: the machine, a line per measured arm, a note per other arm."""
    from minimind.foundations.plain_table import plain_table

    measured = table.arms[table.arms["ms_per_step"].notna()]
    rows = [
        [
            str(row["label"]),
            f"{row['ms_per_step']:,.1f} [{row['ms_per_step_min']:,.1f}, "
            f"{row['ms_per_step_max']:,.1f}]",
            f"{row['cost_ratio']:.3f}",
            f"{row['tokens_per_s']:,.0f}",
            f"{row['flops_per_token']:.3g}",
            f"{row['peak_mib']:,.1f}",
        ]
        for _, row in measured.iterrows()
    ]
    env = table.environment
    headers = ["arm", "ms/step [min, max]", "cost ×", "tok/s", "FLOPs/token", "peak MiB"]
    notes = [f"not measured: {note}" for note in table.arms["note"].dropna() if note]
    return "\n".join(
        [
            f"{env['cpu']}; {env['device']}; {env['threads']} thread(s); torch {env['torch']}; "
            f"cost × relative to {env['cost baseline']}",
            plain_table(headers, rows),
            *notes,
        ]
    )
