"""The study manifest: which runs make each arm, which comparisons each axis makes, what the
literature expects of each, and the steps that train the runs (`steps.py`).

A study is read from YAML like a spec (safe loader, duplicate keys rejected) and validated
whole; every problem is one `SpecError` naming its field path, e.g.
`axes[2].comparisons[0].arm: unknown arm 'gelu'; arms: baseline, relu, ...`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, model_validator

from minimind.compare.ladder import DEFAULT_EXTRAPOLATION
from minimind.foundations.strict_config import StrictNumbers, field_error
from minimind.spec.errors import SpecError, did_you_mean, from_validation_error
from minimind.stats.intervals import Correction
from minimind.stats.sequential import SequentialDesign, Spending
from minimind.study.steps import RunStep, Step

_PATH = re.compile(r"\[\d+\]|[^.\[\]]+")  # "axes[0].comparisons[1]" -> its parts

Expectation = Literal["better", "worse", "equal"]
"""What the literature expects of an arm against its reference: a better or worse objective,
or the same within the study's equivalence margin."""

Scalar = str | int | float | bool
Probe = Literal["attn_max_logit", "resid_rms", "spike"]
"""The probe figures an axis may show (`compare.probe_plots`, stems `probe_<probe>`)."""


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
    scale_of: str | None = None
    """The key of this arm at the study's larger size, where it has two (the decisions across
    scale, `scale_agreement.py`): arms pair one to one, and a comparison's two arms are at one
    size."""
    tried_beyond: list[str] = []
    """Experiments of plain runs at the tuning seeds that try the arm's sweep past its grid
    (runs outside the sweep; a grid over a range can also grow in place, a categorical one
    cannot): whether the arm's tuned values sit on the edge of what was tried counts their values
    too."""

    def selects(self) -> tuple[str, str | None, str]:
        """What runs the arm takes, seeds aside: two arms equal here are one arm's runs."""
        return self.experiment, self.variant, repr(sorted((self.where or {}).items()))

    @model_validator(mode="after")
    def _one_selector(self) -> Arm:
        if (self.variant is None) == (self.where is None):
            field_error(("variant",), "give exactly one of variant (a tag) or where (params)")
        return self


class PreviousRow(StrictNumbers):
    """The row of the previous study (`Study.previous`) that a comparison repeats, by that
    study's labels of its arm and reference: for a row whose labels changed (a reference now
    called baseline, an arm now tuned), which would not join by its own."""

    model_config = {"extra": "forbid"}

    arm: str = Field(min_length=1)
    against: str = Field(min_length=1)


class ArmComparison(StrictNumbers):
    """`arm` against `against`, and what the literature expects of the difference: its
    direction (`expect`), and where a source gives one its size converted to the metric's units
    (`magnitude_bpb`, a value or a [low, high] range, unsigned: the direction is `expect`'s) with
    the `source` it is read from; the row's `references`; `why`, the reason its verdict holds or
    changed against the previous study (`Study.previous`); and `previous`, that study's row it
    repeats where the labels differ; `calibration`, a paired A/A row."""

    model_config = {"extra": "forbid"}

    arm: str
    against: str
    expect: Expectation
    calibration: bool = False
    """Two arms equal by construction (`expect: equal`), paired seed by seed: a check of the
    paired path, not a question, and reported as a calibration row. A comparison of an arm with
    its own runs on disjoint seeds (`Study.is_self_comparison`) is one without saying so."""
    magnitude_bpb: (
        Annotated[float, Field(gt=0)]
        | Annotated[list[float], Field(min_length=2, max_length=2)]
        | None
    ) = None
    source: str | None = Field(default=None, min_length=1)
    references: list[Annotated[str, Field(min_length=1)]] = []
    why: str = ""
    previous: PreviousRow | None = None

    @model_validator(mode="after")
    def _sourced_magnitude(self) -> ArmComparison:
        if (
            isinstance(self.magnitude_bpb, list)
            and not 0 < self.magnitude_bpb[0] <= self.magnitude_bpb[1]
        ):
            field_error(("magnitude_bpb",), "a range is [low, high] with 0 < low <= high")
        if self.magnitude_bpb is not None and self.source is None:
            field_error(("source",), "a magnitude names the source it is read from")
        if self.calibration and self.expect != "equal":
            field_error(("calibration",), "a calibration row expects `equal`")
        if self.magnitude_bpb is not None and self.expect == "equal":
            field_error(
                ("magnitude_bpb",),
                "an `equal` expectation has no magnitude; the margin is its size",
            )
        return self

    def magnitude_range(self) -> tuple[float, float] | None:
        """The sourced size as (low, high), unsigned; None when no source gives one."""
        if self.magnitude_bpb is None:
            return None
        if isinstance(self.magnitude_bpb, list):
            return self.magnitude_bpb[0], self.magnitude_bpb[1]
        return self.magnitude_bpb, self.magnitude_bpb


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
    references: list[str] = []
    """The axis's sources, read as every comparison's that names none of its own."""
    comparisons: list[ArmComparison] = Field(min_length=1)
    sensitivity: list[Sensitivity] = []
    probes: list[Probe] = []
    """The probe figures the axis's finding rests on, by probe (`attn_max_logit`,
    `resid_rms`, `spike`): only these are drawn in its section."""
    discussion: str = ""

    def references_of(self, comparison: ArmComparison) -> list[str]:
        """The comparison's own references, else the axis's."""
        return comparison.references or self.references


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
    """What `minimind study plan` plans for: the difference a `better`/`worse` comparison must
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


class Previous(StrictNumbers):
    """An earlier study's findings.csv (`minimind study report` wrote it), whose verdicts the
    report sets beside this one's (`study.previous`)."""

    model_config = {"extra": "forbid"}

    findings: Path
    label: str = Field(min_length=1)


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
    margin_rationale: str = ""
    """Why the margin is the smallest effect of interest (shown beside the findings)."""
    previous: Previous | None = None
    report_dir: Path = Path("results/study")
    streams: list[Annotated[list[Step], Field(min_length=1)]] = Field(min_length=1)
    """The steps that train the study's runs: each stream's in order, the streams side by side
    (`minimind study train`)."""
    threads_per_stream: int = Field(default=1, gt=0)
    """`OMP_NUM_THREADS` of each stream: one thread per process keeps a busy core from
    stalling the others, and makes a seed's numbers independent of the machine's load."""
    arms: dict[str, Arm] = Field(min_length=1)
    axes: list[Axis] = Field(min_length=1)
    ladders: list[StudyLadder] = []
    planning: Planning | None = None
    sequential: Sequential = Sequential()
    """The looks `study plan` and `study train` use (3, 6, 9, 12 seeds unless set); its last look
    is the cap, beyond which a comparison is not settled."""
    tuning_seeds: list[int] = []
    """The seeds the sweeps behind tuned arms train their trials on. No run of these seeds
    evaluates an arm: a trial chosen as best on a seed would score its own arm on that seed
    again, a selection bias (the analysis refuses a tuned arm whose sweep tuned on another
    seed)."""
    cost_baseline: str | None = None
    """The arm the others' training cost is a ratio of (`minimind study bench`); by default
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

    def planned_difference(self) -> float:
        """The difference a `better`/`worse` comparison's plan must detect: `planning.effect`,
        else the equivalence margin, the smallest effect of interest."""
        return self.planning.effect if self.planning is not None else self.equivalence_margin

    def is_self_comparison(self, comparison: ArmComparison) -> bool:
        """An unpaired A/A comparison: both arms take the same runs, on disjoint seeds."""
        return self.arms[comparison.arm].selects() == self.arms[comparison.against].selects()

    def is_calibration(self, comparison: ArmComparison) -> bool:
        """A calibration row, which must come out no different: an arm against its own runs
        (`is_self_comparison`), or a paired A/A row (`ArmComparison.calibration`)."""
        return comparison.calibration or self.is_self_comparison(comparison)

    def run_steps(self) -> list[RunStep]:
        """Every stream's `run` steps, in the streams' order."""
        return [step for stream in self.streams for step in stream if isinstance(step, RunStep)]

    @model_validator(mode="after")
    def _references_resolve(self) -> Study:
        """Each name the manifest uses names something it defines, once; the first problem is
        one `field_error` naming its path."""
        self._seeds_apart_from_tuning()
        self._cost_baseline_known()
        self._labels_unique()
        for i, axis in enumerate(self.axes):
            self._comparisons_resolve(i, axis)
        self._axis_names_unique()
        self._ladders_resolve()
        self._scales_pair()
        return self

    def previous_rows(self) -> dict[tuple[str, str], tuple[str, str]]:
        """The comparisons that name their previous row: (arm, against) labels here -> there."""
        label = {key: arm.label for key, arm in self.arms.items()}
        return {
            (label[c.arm], label[c.against]): (c.previous.arm, c.previous.against)
            for axis in self.axes
            for c in axis.comparisons
            if c.previous is not None
        }

    def scale_of(self) -> dict[str, str]:
        """Each arm with a larger size: its key -> that arm's key."""
        return {key: arm.scale_of for key, arm in self.arms.items() if arm.scale_of}

    def _scales_pair(self) -> None:
        try:
            check_scale_of(self, self.scale_of())
        except SpecError as err:
            loc = tuple(int(p[1:-1]) if p.startswith("[") else p for p in _PATH.findall(err.path))
            field_error(loc, err.message)

    def _seeds_apart_from_tuning(self) -> None:
        for key, arm in self.arms.items():
            if clash := sorted(set(arm.seeds or []) & set(self.tuning_seeds)):
                field_error(
                    ("arms", key, "seeds"),
                    f"seeds {clash} are tuning seeds: evaluation seeds are apart from them",
                )

    def _cost_baseline_known(self) -> None:
        if self.cost_baseline is not None:
            _known(("cost_baseline",), self.cost_baseline, list(self.arms), "arm")

    def _labels_unique(self) -> None:
        labels = [arm.label for arm in self.arms.values()]
        for key, arm in self.arms.items():
            if labels.count(arm.label) > 1:
                field_error(("arms", key, "label"), f"label {arm.label!r} names another arm too")

    def _comparisons_resolve(self, i: int, axis: Axis) -> None:
        """Axis `i`'s comparisons: known arms, not an arm against itself, an A/A pair on
        disjoint seeds, each arm compared once."""
        compared: set[str] = set()
        for j, comparison in enumerate(axis.comparisons):
            path = ("axes", i, "comparisons", j)
            for side in ("arm", "against"):
                _known((*path, side), getattr(comparison, side), list(self.arms), "arm")
            if comparison.arm == comparison.against:
                field_error((*path, "against"), "an arm against itself")
            if self._shares_seeds(comparison):
                field_error(
                    (*path, "arm"),
                    f"{comparison.arm} takes the runs of {comparison.against}: an A/A "
                    "calibration gives both arms disjoint seeds",
                )
            if not axis.references_of(comparison):
                field_error(
                    (*path, "references"), "name the sources (here, or the axis's references)"
                )
            if comparison.arm in compared:
                field_error((*path, "arm"), f"{comparison.arm} is compared twice in this axis")
            compared.add(comparison.arm)
            if comparison.previous is not None and self.previous is None:
                field_error((*path, "previous"), "names a row of no previous study (`previous:`)")

    def _shares_seeds(self, comparison: ArmComparison) -> bool:
        """Both arms take the same runs on seeds that are not disjoint (or not listed)."""
        arm, against = self.arms[comparison.arm], self.arms[comparison.against]
        if arm.selects() != against.selects():
            return False
        return (
            arm.seeds is None or against.seeds is None or bool(set(arm.seeds) & set(against.seeds))
        )

    def _axis_names_unique(self) -> None:
        names = [axis.name for axis in self.axes]
        for i, name in enumerate(names):
            if name in names[:i]:
                field_error(("axes", i, "name"), f"duplicate axis {name!r}")

    def _ladders_resolve(self) -> None:
        experiments = [ladder.experiment for ladder in self.ladders]
        axes = [axis.name for axis in self.axes]
        for i, ladder in enumerate(self.ladders):
            if ladder.experiment in experiments[:i]:
                field_error(("ladders", i, "experiment"), f"ladder {ladder.experiment!r} twice")
            for tag, target in ladder.axes.items():
                _known(("ladders", i, "axes", tag), target, axes, "axis")


_PLURAL = {"arm": "arms", "axis": "axes"}


def _known(path: tuple[str | int, ...], name: str, names: list[str], kind: str) -> None:
    """A `field_error` at `path` unless `name` is one of `names`, the manifest's `kind`s."""
    if name not in names:
        field_error(
            path,
            f"unknown {kind} {name!r}; {_PLURAL[kind]}: {', '.join(names)}"
            + did_you_mean(name, names),
        )


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


def check_scale_of(study: Study, scale_of: Mapping[str, str]) -> None:
    """`SpecError` (one line, naming the field path) unless `scale_of` pairs arms one to one:
    each key and value a known arm, no arm its own, no larger arm with a `scale_of` of its own
    (no chains), no larger arm named twice, and no comparison with one arm at each size."""
    arms = list(study.arms)
    named: dict[str, str] = {}
    for key, larger in scale_of.items():
        path = f"arms.{key}.scale_of"
        if key not in study.arms:
            raise SpecError(f"arms.{key}", f"unknown arm {key!r}; arms: {', '.join(arms)}")
        if larger not in study.arms:
            raise SpecError(
                path,
                f"unknown arm {larger!r}; arms: {', '.join(arms)}" + did_you_mean(larger, arms),
            )
        if larger == key:
            raise SpecError(path, "an arm is not its own larger size")
        if larger in scale_of:
            raise SpecError(path, f"{larger} has a scale_of of its own: name the largest arm")
        if larger in named:
            raise SpecError(path, f"{larger} is the larger size of {named[larger]} already")
        named[larger] = key
    for i, axis in enumerate(study.axes):
        for j, c in enumerate(axis.comparisons):
            if (c.arm in scale_of) != (c.against in scale_of):
                small, large = (c.arm, c.against) if c.arm in scale_of else (c.against, c.arm)
                raise SpecError(
                    f"axes[{i}].comparisons[{j}]",
                    f"{small} has a scale_of and {large} none: both arms of a comparison are "
                    "at one size",
                )
