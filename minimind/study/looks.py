"""`minimind study train` after the streams: the sequential design's looks, each trained for
the comparisons still open.

The streams train the first look. Then, until every comparison has stopped (a difference,
equivalence, or the cap):

1. the design is replayed over the runs in the store (`planning.plan_from_runs`,
   `planning.sequential_decisions`), the error rate held across looks by alpha spending and
   Holm per axis (`minimind.stats.sequential`);
2. each comparison still open names, for its two arms, the seeds of the look it waits for (the
   first `looks[k]` of `Study.evaluation_seeds`, the tuning seeds skipped; an A/A arm's own
   listed seeds) that have no finished run: a finished (arm, seed) is never trained again;
3. those runs are trained: per experiment, set of seeds and stream run step that trains the
   variants, one run step with that step's spec and overrides, the look's seeds in place of
   the step's and the variants named (`minimind run SPEC [its overrides] -o seeds=[...]
   --variant V ... --resume`), the steps side by side in as many streams as the manifest has,
   those of one spec in one stream (`spread`).

Nothing is remembered between invocations: what a look trains is read from the store, so a study
stopped anywhere and run again continues where it stopped.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from minimind.compare import RunSet
from minimind.record import BUDGET_TAG
from minimind.study.analysis import StudyError, arm_variant, load_experiments
from minimind.study.arm_specs import run_commands
from minimind.study.manifest import Arm, Study
from minimind.study.planning import arm_values, plan_from_runs, sequential_decisions
from minimind.study.steps import RunStep
from minimind.study.streams import Failure, Launch, run_streams


@dataclass(frozen=True)
class LookRuns:
    """Runs a look trains in one invocation: `variants` of `experiment`, each on `seeds`."""

    experiment: str
    variants: tuple[str, ...]
    seeds: tuple[int, ...]


def missing_runs(study: Study, runsets: Mapping[str, RunSet]) -> tuple[list[LookRuns], list[str]]:
    """The runs the open comparisons' next looks need and have not finished, grouped per
    experiment and seeds; and one note per open comparison that cannot go on (an A/A arm that
    lists fewer seeds than the look needs)."""
    planned = plan_from_runs(study, dict(runsets))
    decisions = sequential_decisions(study, planned)
    needed: dict[str, set[int]] = {}
    notes = []
    for axis in study.axes:
        outcome = decisions[axis.name]
        for j, comparison in enumerate(axis.comparisons):
            if outcome.stop[0, j] != "open":
                continue
            n = study.sequential.looks[int(outcome.look[0, j])]
            for key in (comparison.arm, comparison.against):
                listed = study.arms[key].seeds
                if listed is not None and len(listed) < n:
                    notes.append(
                        f"{axis.name}: {comparison.arm} vs {comparison.against} cannot go on to "
                        f"{n} seeds: arms.{key}.seeds lists {len(listed)}"
                    )
                    break
                look = sorted(listed)[:n] if listed is not None else study.evaluation_seeds(n)
                needed.setdefault(key, set()).update(
                    set(look) - _finished_seeds(study, key, runsets)
                )
    groups: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for key, missing in needed.items():
        if not missing:
            continue
        arm = study.arms[key]
        variant = spec_variant(key, arm, runsets[arm.experiment])
        variants = groups.setdefault((arm.experiment, tuple(sorted(missing))), [])
        if variant not in variants:
            variants.append(variant)
    runs = [LookRuns(e, tuple(v), s) for (e, s), v in groups.items()]
    return runs, list(dict.fromkeys(notes))


def spec_variant(key: str, arm: Arm, runset: RunSet) -> str:
    """The variant of the stream's spec that trains the arm's runs: the one it names, or for an
    arm chosen by params the one its runs carry on any seed (an A/A arm's own seeds have no run
    before its first look), as the spec names it: the runs of a spec with budget branches are
    the variants `budget=<steps>,<name>`, tagged with their budget."""
    variant = arm_variant(key, arm.model_copy(update={"seeds": None}), runset)
    runs = runset.runs
    if f"tags.{BUDGET_TAG}" not in runs:
        return variant
    budget = runs.loc[runs["variant"] == variant, f"tags.{BUDGET_TAG}"].dropna()
    return variant.removeprefix(f"budget={budget.iloc[0]},") if len(budget) else variant


def _finished_seeds(study: Study, key: str, runsets: Mapping[str, RunSet]) -> set[int]:
    try:
        return {int(seed) for seed in arm_values(study, key, dict(runsets)).index}
    except StudyError:
        return set()  # none trained yet


def look_steps(study: Study, runs: list[LookRuns]) -> list[RunStep]:
    """The run steps of each `LookRuns`: one per stream run step that trains some of its
    variants, each variant from the first that does (`StudyError` naming a variant no stream
    step trains)."""
    sources = run_commands(study)[0]
    steps = []
    for look in runs:
        # each variant from the first step that trains it: an experiment two specs log to gets
        # a step per spec
        by_source: dict[int, list[str]] = {}
        for variant in look.variants:
            source = next(
                (
                    k
                    for k, command in enumerate(sources)
                    if command.experiment == look.experiment and variant in command.names
                ),
                None,
            )
            if source is None:
                raise StudyError(
                    f"streams: no run step trains {variant} of {look.experiment}; a look adds "
                    "seeds to the specs the streams run"
                )
            by_source.setdefault(source, []).append(variant)
        for source, variants in by_source.items():
            update = {"variants": tuple(variants), "seeds": look.seeds}
            steps.append(sources[source].step.model_copy(update=update))
    return steps


def train_looks(
    study: Study,
    tracking_uri: str,
    log_dir: Path,
    train: Callable[[list[LookRuns]], list[Failure]] | None = None,
    launch: Launch | None = None,
) -> list[Failure]:
    """Train look after look until every comparison has stopped or one cannot go on; the
    failures of the look that failed, empty otherwise. `train` trains a look's runs (by
    default `look_steps` side by side, in as many streams as the manifest has, each with
    `launch`: under Slurm a look's jobs are submitted only after the previous look was analysed)."""
    train = train or _trainer(study, log_dir, launch or Launch())
    previous: list[LookRuns] | None = None
    while True:
        runs, notes = missing_runs(study, load_experiments(study, tracking_uri))
        for note in notes:
            print(f"study: {note}", file=sys.stderr)
        if not runs:
            return []
        if runs == previous:  # trained, and still not finished: never loop on it
            raise StudyError(
                f"the look's runs did not finish: {_describe(runs)} (see the logs in {log_dir})"
            )
        print(f"study: next look, training {_describe(runs)}", file=sys.stderr, flush=True)
        failures = train(runs)
        if failures:
            return failures
        previous = runs


def _describe(runs: list[LookRuns]) -> str:
    return "; ".join(
        f"{r.experiment} {', '.join(r.variants)} on seeds {', '.join(map(str, r.seeds))}"
        for r in runs
    )


def _trainer(
    study: Study, log_dir: Path, launch: Launch
) -> Callable[[list[LookRuns]], list[Failure]]:
    looks = iter(range(1, 10_000))

    def train(runs: list[LookRuns]) -> list[Failure]:
        streams = spread(look_steps(study, runs), len(study.streams))
        look = f"look{next(looks)}-stream"
        return run_streams(streams, study.threads_per_stream, log_dir, look, launch)

    return train


def spread(steps: list[RunStep], width: int) -> list[list[RunStep]]:
    """`steps` in `width` streams, those of one spec file in one stream, one after another;
    the specs' groups, largest first, each to the stream with the fewest runs so far, so that a
    look ends when its runs do rather than when its most crowded stream does.

    Two look steps of one spec (other seeds, other variants) hash alike, since a spec's hash
    leaves its seeds out: at once, each `--resume` would reopen the same parent run and end the
    other's runs as stale, and under Slurm rewrite the spec file the other's jobs read."""
    by_spec: dict[str, list[RunStep]] = {}
    for step in steps:
        by_spec.setdefault(step.spec, []).append(step)
    streams: list[list[RunStep]] = [[] for _ in range(width)]
    loads = [0] * width
    groups = sorted(by_spec.values(), key=lambda group: -sum(map(_runs_of, group)))
    for group in groups:  # a stable sort: groups of equal size keep their order
        k = loads.index(min(loads))
        streams[k].extend(group)
        loads[k] += sum(map(_runs_of, group))
    return streams


def _runs_of(step: RunStep) -> int:
    """The runs a look step trains: its variants times its seeds (a look step names both)."""
    return max(len(step.variants), 1) * (len(step.seeds) if step.seeds is not None else 1)
