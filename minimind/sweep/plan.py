"""From a spec file to the studies a sweep runs, with every input checked before anything runs.

Each ablation cell of the spec is a study of its own, named `<spec>/<variant>` (just `<spec>`
without `ablate`), so that each variant is compared at its own tuned values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from minimind.run.plan import Plan, plan_run
from minimind.spec import (
    BASE_VARIANT,
    Spec,
    SpecError,
    SweepConfig,
    Variant,
    load_spec,
    spec_hash,
)
from minimind.sweep.algorithms import build_pruner, build_sampler
from minimind.sweep.space import describe_param, grid_size
from minimind.sweep.storage import check_storage_url


@dataclass(frozen=True)
class StudyCell:
    """One study: an ablation cell (its spec keeps the `sweep` section), its name and
    `cell_hash`, the hash of the cell's spec, which the study remembers (not the whole spec's
    `plan_hash`, which tags the runs)."""

    name: str
    variant: Variant
    cell_hash: str

    @property
    def spec(self) -> Spec:
        return self.variant.spec

    @property
    def sweep(self) -> SweepConfig:
        return self.spec.sweep_section()


@dataclass(frozen=True)
class SweepPlan:
    run_plan: Plan
    cells: list[StudyCell]

    @property
    def spec(self) -> Spec:
        return self.run_plan.spec

    @property
    def sweep(self) -> SweepConfig:
        return self.spec.sweep_section()


def plan_sweep(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    workers: int | None = None,
    trials: int | None = None,
    tracking_uri: str | None = None,
) -> SweepPlan:
    """Load and check a sweep spec; `workers`, `trials` and `tracking_uri` are the command-line
    options that override `sweep.workers`, `sweep.trials` and `tracking.uri`. Raises `SpecError`
    (exit code 2) and writes nothing."""
    extra = []
    for key, flag, value in (("workers", "--workers", workers), ("trials", "--trials", trials)):
        if value is not None:
            if value < 1:
                raise SpecError(f"sweep.{key}", f"must be > 0, got {value} (from {flag})")
            extra.append(f"sweep.{key}={value}")
    if tracking_uri is not None:
        extra.append(f"tracking.uri={tracking_uri}")
    run_plan = plan_run(load_spec(path, [*overrides, *extra]))
    spec = run_plan.spec
    sweep = spec.sweep_section()
    if not sweep.params:
        raise SpecError(
            "sweep.params",
            "no search dimensions; add one such as "
            "train.optimizer.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}",
        )
    if sweep.seeds_per_trial > len(spec.seeds):
        raise SpecError(
            "sweep.seeds_per_trial",
            f"must be <= the number of seeds ({len(spec.seeds)}), got {sweep.seeds_per_trial}",
        )
    check_storage_url(sweep.storage)
    build_sampler(sweep, sweep.sampler.seed)
    build_pruner(sweep)
    cells = [
        StudyCell(study_name(spec.name, variant.name), variant, spec_hash(variant.spec))
        for variant in run_plan.variants
    ]
    return SweepPlan(run_plan, cells)


def study_name(spec_name: str, variant_name: str) -> str:
    return spec_name if variant_name == BASE_VARIANT else f"{spec_name}/{variant_name}"


def searches_grid(sweep: SweepConfig) -> bool:
    """Whether the sampler visits the points of a finite grid (`space.grid_space`)."""
    return sweep.sampler.name in ("grid", "bruteforce")


def target_trials(sweep: SweepConfig) -> int:
    """Trials a study runs to (`optuna_study.counted`): `trials`, or fewer when a grid
    or brute-force search has fewer points."""
    if searches_grid(sweep):
        return min(sweep.trials, grid_size(sweep.params))
    return sweep.trials


def worker_names(n: int) -> list[str]:
    """The names of a study's `n` worker jobs, as the dry run and the submission lines show them."""
    return [f"worker {i}" for i in range(n)]


def describe_sweep(plan: SweepPlan) -> str:
    """The `--dry-run` listing: per study its target, sampler, pruner, storage and search space,
    and under the Slurm launcher its worker jobs with their resources. The workers are at most
    the target: a study an earlier invocation began runs fewer (its storage is not opened here)."""
    from minimind.run.cluster import slurm

    launcher = plan.spec.launcher
    lines = []
    for cell in plan.cells:
        sweep = cell.sweep
        target = target_trials(sweep)
        workers = min(sweep.workers, target)
        where = "Slurm job(s)" if launcher.name == "slurm" else "worker process(es)"
        scored = ", ".join(f"{o.metric} ({o.direction})" for o in sweep.objective)
        lines.append(
            f"study {cell.name}: {target} finished trials scored by {scored}, "
            f"{sweep.sampler.name} sampler, {sweep.pruner.name} pruner, "
            f"at most {workers} {where}; storage {sweep.storage}"
        )
        lines += [f"  {key}: {describe_param(p)}" for key, p in sweep.params.items()]
        if launcher.name == "slurm":
            jobs = slurm.describe_jobs(launcher, worker_names(workers))
            lines += [f"  {line}" for line in jobs.splitlines()]
    return "\n".join(lines)
