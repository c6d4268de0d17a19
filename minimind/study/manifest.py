"""The study manifest: which runs make each arm, which comparisons each axis makes, what the
literature expects of each, and the commands that train the runs.

A study is read from YAML like a spec (safe loader, duplicate keys rejected) and validated
whole; every problem is one `SpecError` naming its field path, e.g.
`axes[2].comparisons[0].arm: unknown arm 'gelu'; arms: baseline, relu, ...`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from minimind.compare.ladder import DEFAULT_EXTRAPOLATION
from minimind.foundations.strict_config import StrictNumbers, field_error
from minimind.spec.errors import did_you_mean, from_validation_error
from minimind.stats.intervals import Correction
from minimind.stats.sequential import SequentialDesign, Spending

Expectation = Literal["better", "worse", "equal"]
"""What the literature expects of an arm against its reference: a better or worse objective,
or the same within the study's equivalence margin."""

Scalar = str | int | float | bool


class Arm(StrictNumbers):
    """The runs of one arm: the runs of `experiment` (a spec's, or a sweep's `best.yaml`, which
    logs beside the sweep's trials; every invocation, the newest run of each seed, the trials
    and the tuning seeds left out), narrowed to one `variant` tag or to the runs whose params
    equal `where` (for arms whose variant name is only known once a sweep has chosen, such as
    a tuned learning rate)."""

    model_config = {"extra": "forbid"}

    label: str = Field(min_length=1)
    experiment: str = Field(min_length=1)
    variant: str | None = None
    where: dict[str, Scalar] | None = None
    seeds: list[int] | None = None
    """Only these seeds of the runs: an A/A arm takes its reference's own runs on seeds disjoint
    from the reference's (the study's calibration: it must come out no different)."""
    tried_beyond: list[str] = []
    """Experiments whose runs at the tuning seeds try the arm's sweep past its grid (an Optuna
    grid cannot grow in place): whether the arm's tuned values sit on the edge of what was tried
    counts their values too."""

    def selects(self) -> tuple[str, str | None, str]:
        """What runs the arm takes, seeds aside: two arms equal here are one arm's runs."""
        return self.experiment, self.variant, repr(sorted((self.where or {}).items()))

    @model_validator(mode="after")
    def _one_selector(self) -> Arm:
        if (self.variant is None) == (self.where is None):
            field_error(("variant",), "give exactly one of variant (a tag) or where (params)")
        return self


class ArmComparison(StrictNumbers):
    """`arm` against `against`, and what the literature expects of the difference."""

    model_config = {"extra": "forbid"}

    arm: str
    against: str
    expect: Expectation


class Sensitivity(StrictNumbers):
    """A figure of the final objective against one param over a sweep's trials, one line per
    value of `by`: the learning-rate curves behind a tuned arm."""

    model_config = {"extra": "forbid"}

    experiment: str = Field(min_length=1)
    x: str = Field(min_length=1)
    by: str = Field(min_length=1)
    log_x: bool = True


class Axis(StrictNumbers):
    """One question: its comparisons (one family for the correction), the literature's answer
    and, once the runs are in, what the study makes of the difference."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[A-Za-z][\w-]*$")
    title: str
    expected: str
    references: list[str] = Field(min_length=1)
    comparisons: list[ArmComparison] = Field(min_length=1)
    sensitivity: list[Sensitivity] = []
    discussion: str = ""


class StudyLadder(StrictNumbers):
    """A ladder the study reads beside its axes (a spec with `ladder:`, trained by a stream):
    its runs compared as `minimind compare` compares them (`compare.ladder`), in the report's
    section "At more than one scale"."""

    model_config = {"extra": "forbid"}

    experiment: str = Field(min_length=1)
    title: str = Field(min_length=1)
    extrapolate: float = Field(default=DEFAULT_EXTRAPOLATION, gt=0)
    """The multiple of the top rung's compute the multiplier is extrapolated to, as
    `minimind compare --extrapolate`."""
    axes: dict[str, str] = {}
    """The study axis each ladder arm speaks to, by the arm's tag (`attention=mqa`): that
    axis's section points to the arm's row of the ladder."""
    discussion: str = ""


class Planning(StrictNumbers):
    """What `minimind study --plan` plans for: the difference a `better`/`worse` comparison must
    detect (`effect`, in the metric's units) at `power`, from `sd`, the sd of the per-seed paired
    differences, or, when omitted, the sd measured from each comparison's runs so far."""

    model_config = {"extra": "forbid"}

    effect: float = Field(gt=0)
    sd: float | None = Field(default=None, gt=0)
    power: float = Field(default=0.8, gt=0, lt=1)


class Sequential(StrictNumbers):
    """The looks of the sequential design (`minimind.stats.sequential`): seeds per arm at each
    look, increasing, the last the cap; the alpha-spending function."""

    model_config = {"extra": "forbid"}

    looks: list[int] = Field(default=[3, 6, 9, 12], min_length=1)
    spending: Spending = "obrien_fleming"

    @model_validator(mode="after")
    def _increasing(self) -> Sequential:
        if self.looks[0] < 2 or self.looks != sorted(set(self.looks)):
            field_error(("looks",), "seeds per look increase, from at least 2")
        return self

    def design(self, alpha: float) -> SequentialDesign:
        return SequentialDesign(tuple(self.looks), alpha, self.spending)


class Study(StrictNumbers):
    """A study manifest (see experiments/study/study.yaml)."""

    model_config = {"extra": "forbid"}

    name: str = Field(min_length=1)
    title: str
    description: str = ""
    metric: str = "val/bpb"
    correction: Correction = "holm"
    equivalence_margin: float = Field(gt=0)
    """The largest difference of the objective that counts as "equal" (in its units)."""
    report_dir: Path = Path("results/study")
    streams: list[list[str]] = Field(min_length=1)
    """The commands that train the study's runs: each stream's in order, the streams side by
    side (`minimind study --train`)."""
    threads_per_stream: int = Field(default=1, gt=0)
    """`OMP_NUM_THREADS` of each stream: one thread per process keeps a busy core from
    stalling the others, and makes a seed's numbers independent of the machine's load."""
    arms: dict[str, Arm] = Field(min_length=1)
    axes: list[Axis] = Field(min_length=1)
    ladders: list[StudyLadder] = []
    planning: Planning | None = None
    sequential: Sequential = Sequential()
    """The looks `--plan` and `--train` use (3, 6, 9, 12 seeds unless set); its last look
    is the cap, beyond which a comparison is not settled."""
    tuning_seeds: list[int] = []
    """The seeds the sweeps behind tuned arms train their trials on. No run of these seeds
    evaluates an arm: a trial chosen as best on a seed would score its own arm on that seed
    again, a selection bias (the analysis refuses a tuned arm whose sweep tuned on another
    seed)."""
    cost_baseline: str | None = None
    """The arm the others' training cost is a ratio of (`minimind study --bench`); by default
    the reference of the most comparisons (`cost_baseline_arm`)."""

    def evaluation_seeds(self, count: int) -> list[int]:
        """The first `count` seeds that evaluate arms: 0, 1, 2, ... with the tuning seeds
        skipped. Look k trains the first `looks[k]` of them."""
        tuning = set(self.tuning_seeds)
        seeds: list[int] = []
        seed = 0
        while len(seeds) < count:
            if seed not in tuning:
                seeds.append(seed)
            seed += 1
        return seeds

    def cost_baseline_arm(self) -> str:
        """`cost_baseline`, or the arm most comparisons are made against (the first of those
        in the manifest's order on a tie)."""
        if self.cost_baseline is not None:
            return self.cost_baseline
        against = [c.against for axis in self.axes for c in axis.comparisons]
        return max(self.arms, key=against.count)

    def is_calibration(self, comparison: ArmComparison) -> bool:
        """An A/A comparison: both arms take the same runs, on disjoint seeds."""
        return self.arms[comparison.arm].selects() == self.arms[comparison.against].selects()

    @model_validator(mode="after")
    def _references_resolve(self) -> Study:
        for i, stream in enumerate(self.streams):
            if not stream:
                field_error(("streams", i), "a stream lists at least one command")
            for j, command in enumerate(stream):
                if not command.startswith("minimind "):
                    field_error(("streams", i, j), "a command is `minimind ...`")
                try:
                    shlex.split(command)
                except ValueError as e:
                    field_error(("streams", i, j), f"cannot be split into arguments: {e}")
        names = list(self.arms)
        for key, arm in self.arms.items():
            if clash := sorted(set(arm.seeds or []) & set(self.tuning_seeds)):
                field_error(
                    ("arms", key, "seeds"),
                    f"seeds {clash} are tuning seeds: evaluation seeds are apart from them",
                )
        if self.cost_baseline is not None and self.cost_baseline not in self.arms:
            field_error(
                ("cost_baseline",),
                f"unknown arm {self.cost_baseline!r}; arms: {', '.join(names)}"
                + did_you_mean(self.cost_baseline, names),
            )
        labels = [arm.label for arm in self.arms.values()]
        for key, arm in self.arms.items():
            if labels.count(arm.label) > 1:
                field_error(("arms", key, "label"), f"label {arm.label!r} names another arm too")
        for i, axis in enumerate(self.axes):
            compared = set()
            for j, comparison in enumerate(axis.comparisons):
                for side in ("arm", "against"):
                    key = getattr(comparison, side)
                    if key not in self.arms:
                        field_error(
                            ("axes", i, "comparisons", j, side),
                            f"unknown arm {key!r}; arms: {', '.join(names)}{did_you_mean(key, names)}",
                        )
                if comparison.arm == comparison.against:
                    field_error(("axes", i, "comparisons", j, "against"), "an arm against itself")
                arm, against = self.arms[comparison.arm], self.arms[comparison.against]
                if arm.selects() == against.selects() and (
                    arm.seeds is None
                    or against.seeds is None
                    or set(arm.seeds) & set(against.seeds)
                ):
                    field_error(
                        ("axes", i, "comparisons", j, "arm"),
                        f"{comparison.arm} takes the runs of {comparison.against}: an A/A "
                        "calibration gives both arms disjoint seeds",
                    )
                if comparison.arm in compared:
                    field_error(
                        ("axes", i, "comparisons", j, "arm"),
                        f"{comparison.arm} is compared twice in this axis",
                    )
                compared.add(comparison.arm)
        seen = [axis.name for axis in self.axes]
        for i, name in enumerate(seen):
            if name in seen[:i]:
                field_error(("axes", i, "name"), f"duplicate axis {name!r}")
        ladders = [ladder.experiment for ladder in self.ladders]
        for i, ladder in enumerate(self.ladders):
            if ladder.experiment in ladders[:i]:
                field_error(("ladders", i, "experiment"), f"ladder {ladder.experiment!r} twice")
            for tag, target in ladder.axes.items():
                if target not in seen:
                    field_error(
                        ("ladders", i, "axes", tag),
                        f"unknown axis {target!r}; axes: {', '.join(seen)}"
                        + did_you_mean(target, seen),
                    )
        return self


def where_matches(param: object, value: Scalar) -> bool:
    """Whether a param equals an arm's `where` value: as numbers when the value is one (`0.001`
    is `1e-3`; MLflow keeps params as text), else as text. The one rule by which a tuned arm
    selects its runs (`analysis.arm_selection`) and its spec (`arm_specs`)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(str(param)) == float(value)
        except ValueError:
            return False
    return str(param) == str(value)


def load_study(path: str | Path) -> Study:
    """Read and validate the manifest at `path` (raises `SpecError`, one line)."""
    from minimind.spec.loader import read_yaml_mapping

    try:
        return Study.model_validate(read_yaml_mapping(Path(path)))
    except ValidationError as err:
        raise from_validation_error(err, Study) from err
