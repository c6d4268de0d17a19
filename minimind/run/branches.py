"""Budget branches (`train.schedule: {name: wsd, warmup: W, branches: [...]}`): several token
budgets from one warmup-stable-decay run, as OLMo-core and Marin train them.

A wsd run's steps before its decay are at the full lr whatever its length
(`optim.decay_start_step`), so one run to the largest budget (the trunk, `train.steps`) passes
through the state every shorter wsd run has when its decay starts. The trunk saves that state
(`fork<step>.pt` in its checkpoint directory) and each shorter budget continues from it as its
own child run, decaying over its own steps: bit for bit the plain wsd run of that budget on one
CPU thread (tests/training/test_train.py). Each budget's run is the variant
`budget=<steps>,<variant>` tagged `budget` (and `arm`, the variant without the budget), so
compare and a ladder read a (variant, seed, budget) point as any other run.

A shorter budget's run logs from its fork on (its curve before is the trunk's). The compute
saved against separate runs is the shorter budgets' stable phases (`describe_branches`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minimind.record import ARM_TAG, BUDGET_TAG, checkpoint_path
from minimind.spec import Spec, Variant
from minimind.training.checkpoint import load_checkpoint, save_checkpoint
from minimind.training.optim import decay_start_step

if TYPE_CHECKING:
    from minimind.spec.sections import TrainConfig


def budgets(train: TrainConfig) -> list[int]:
    """The budgets a spec's runs train, in steps, shortest first: its branches and its steps
    (the trunk's own end); [] without branches."""
    branches = train.schedule.branches
    if branches is None:
        return []
    assert train.steps is not None  # validated: branches need a budget of steps
    return sorted({*branches, train.steps})


def fork_steps(train: TrainConfig) -> dict[int, int]:
    """{budget: the step its branch forks from the trunk at}, the trunk's budget left out."""
    schedule = train.resolved_schedule
    return {b: decay_start_step(b, schedule) for b in budgets(train)[:-1]}


def branch_variant(variant: Variant, budget: int) -> Variant:
    """`variant` trained for `budget` steps as a plain wsd run: named `budget=<steps>,<name>`."""
    spec = variant.spec
    schedule = spec.train.schedule.model_copy(update={"branches": None})
    train = spec.train.model_copy(update={"steps": budget, "schedule": schedule})
    return replace(
        variant,
        name=f"budget={budget},{variant.name}",
        spec=spec.model_copy(update={"train": train}),
    )


def budget_variants(variant: Variant) -> list[Variant]:
    """The variants whose runs train `variant`: one per budget with branches, else itself."""
    return [branch_variant(variant, b) for b in budgets(variant.spec.train)] or [variant]


def branch_tags(variant: Variant, budget: int) -> dict[str, str]:
    """A budget branch's run tags: its budget in steps and its variant without the budget."""
    return {BUDGET_TAG: str(budget), ARM_TAG: variant.arm or variant.name}


class ForkFile:
    """Where the trunk leaves the state a branch starts from (a `fit` fork writer)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def save(self, state: Any) -> None:
        save_checkpoint(self.path, dict(state))

    def load(self) -> dict[str, Any]:
        return load_checkpoint(self.path)


def fork_file(
    spec: Spec, experiment: str, plan_hash: str, variant: Variant, seed: int, step: int
) -> ForkFile:
    """The fork file of `variant` × `seed` at `step`, beside the trunk's checkpoint."""
    trunk = branch_variant(variant, budgets(spec.train)[-1])
    directory = checkpoint_path(
        spec.train.checkpoint_dir, experiment, plan_hash, trunk.name, seed
    ).parent
    return ForkFile(directory / f"fork{step}.pt")


def describe_branches(specs: list[Spec], seeds: int) -> list[str]:
    """The dry run's lines on branches, for the variants' `specs` each trained on `seeds` seeds:
    per set of budgets (a ladder's rungs each have their own), where each forks and the steps
    saved against training every budget as a run of its own, then the tokens saved over all."""
    # Variants whose budgets, forks and tokens per step agree share a line (a ladder's rung).
    groups: dict[tuple[Any, ...], list[Spec]] = {}
    for spec in specs:
        if budgets(spec.train):
            starts = fork_steps(spec.train).values()
            key = (*budgets(spec.train), *starts, spec.train.tokens_per_step)
            groups.setdefault(key, []).append(spec)
    lines, saved_tokens, separate_tokens = [], 0, 0
    for members in groups.values():
        train = members[0].train
        found, forks = budgets(train), fork_steps(train)
        separate = sum(found)
        branched = found[-1] + sum(b - forks[b] for b in found[:-1])
        runs = seeds * len(members)
        saved = (separate - branched) * runs * train.tokens_per_step
        saved_tokens += saved
        separate_tokens += separate * runs * train.tokens_per_step
        at = ", ".join(f"{b} at step {forks[b]}" for b in found[:-1])
        lines.append(
            f"budget branches: {', '.join(map(str, found))} steps, one wsd run to {found[-1]} "
            f"forking {at}; {branched:,} steps per variant x seed instead of {separate:,} as "
            f"separate runs: {separate - branched:,} saved ({1 - branched / separate:.0%}), "
            f"{saved:,} tokens over {runs} run(s)"
        )
    if len(groups) > 1:
        lines.append(
            f"budget branches in all: {saved_tokens:,} of {separate_tokens:,} training tokens "
            f"saved ({saved_tokens / separate_tokens:.0%}) against separate runs"
        )
    return lines


def train_branches(
    variant: Variant,
    seed: int,
    spec: Spec,
    experiment: str,
    plan_hash: str,
    train_one: Callable[[Variant, dict[str, str], dict[int, ForkFile], ForkFile | None], bool],
    finished: Callable[[Variant], bool],
) -> list[str]:
    """Train every budget of `variant` × `seed`: the trunk first (saving the forks its
    unfinished branches need), then each shorter budget from its fork. `train_one(branch,
    tags, forks, start)` trains one budget's run, or skips it when an earlier invocation
    finished it (False: it did not finish); `finished(branch)` says whether one did, so that a
    finished trunk saves no fork. The names of the runs that did not finish, in order."""
    found = budgets(spec.train)
    forks = fork_steps(spec.train)
    files = {b: fork_file(spec, experiment, plan_hash, variant, seed, forks[b]) for b in forks}
    trunk = branch_variant(variant, found[-1])
    unfinished = [b for b in found[:-1] if not finished(branch_variant(variant, b))]
    wanted = {} if finished(trunk) else {forks[b]: files[b] for b in unfinished}
    if not train_one(trunk, branch_tags(variant, found[-1]), wanted, None):
        return [trunk.name] + [branch_variant(variant, b).name for b in unfinished]
    failed: list[str] = []
    for budget in reversed(found[:-1]):
        branch = branch_variant(variant, budget)
        if not train_one(branch, branch_tags(variant, budget), {}, files[budget]):
            failed.append(branch.name)
    return failed
