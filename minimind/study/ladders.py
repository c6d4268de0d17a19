"""The study's ladders (`ladders:` in the manifest): each one's runs compared as `minimind
compare` compares a ladder's (`compare.ladder.compare_ladder`, the runs `load_runs` selects by
default), or why there is no comparison yet, for the report's section "At more than one scale".

A ladder may be read while it trains: missing runs, a rung without its baseline arm or arms
without a fit are said in the section, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from minimind.compare import CompareError, CompareOptions, load_runs
from minimind.compare.ladder import Ladder, compare_ladder, is_ladder
from minimind.compare.ladder_render import result_rows
from minimind.record import ARM_TAG, RUNG_TAG
from minimind.study.manifest import Study, StudyLadder


@dataclass(frozen=True)
class LadderReading:
    """One manifest entry (`entry`, the `index`-th), its comparison (None until one can be
    made) and `notes`: what is missing or incomplete, or why there is no comparison."""

    entry: StudyLadder
    index: int
    ladder: Ladder | None
    notes: tuple[str, ...]

    @property
    def anchor(self) -> str:
        return f"ladder-{self.index}"


def read_ladders(study: Study, tracking_uri: str) -> list[LadderReading]:
    """Each of the manifest's ladders, compared on the study's metric and correction."""
    return [_read(study, i, entry, tracking_uri) for i, entry in enumerate(study.ladders)]


def _read(study: Study, index: int, entry: StudyLadder, tracking_uri: str) -> LadderReading:
    name = entry.experiment
    try:
        runset = load_runs(tracking_uri, [name])
    except CompareError as e:
        return LadderReading(entry, index, None, (f"no runs of {name} yet ({e})",))
    if runset.runs.empty:
        return LadderReading(entry, index, None, (f"no runs of {name} yet ({runset.selection})",))
    if not is_ladder(runset):
        note = f"the runs of {name} are not a ladder's (tagged {RUNG_TAG} and {ARM_TAG})"
        return LadderReading(entry, index, None, (note,))
    notes = _incomplete(runset.runs)
    try:
        options = CompareOptions(metric=study.metric, correction=study.correction)
        ladder = compare_ladder(runset, options, extrapolate_factor=entry.extrapolate)
    except CompareError as e:
        return LadderReading(entry, index, None, (*notes, f"no comparison yet: {e}"))
    arms = list(ladder.arms)
    unknown = [
        f"ladders[{index}].axes.{arm}: no run of arm {arm!r} yet; arms: {', '.join(arms)}"
        for arm in entry.axes
        if arm not in arms
    ]
    return LadderReading(entry, index, ladder, (*notes, *unknown))


def _incomplete(runs: pd.DataFrame) -> tuple[str, ...]:
    """What a ladder still training lacks: unfinished runs, and the arms a rung has no run of."""
    notes = []
    finished = int((runs["status"] == "FINISHED").sum())
    if finished < len(runs):
        notes.append(
            f"incomplete: {finished} of the {len(runs)} runs read have finished (the others "
            "are running, failed or were killed: left out of the statistics)"
        )
    rung, arm = runs[f"tags.{RUNG_TAG}"].astype(str), runs[f"tags.{ARM_TAG}"].astype(str)
    arms = list(dict.fromkeys(arm))
    for name in dict.fromkeys(rung):
        if missing := [a for a in arms if not ((rung == name) & (arm == a)).any()]:
            notes.append(f"rung {name} has no run of {', '.join(missing)} yet")
    return tuple(notes)


def axis_pointers(readings: list[LadderReading], axis: str) -> list[str]:
    """A line per ladder arm that speaks to `axis`: its comparison across the ladder (the
    ladder table's row: exponent difference, extrapolated multiplier, trend), or why there is
    none yet."""
    lines = []
    for reading in readings:
        for arm, target in reading.entry.axes.items():
            if target == axis:
                lines.append(_pointer(reading, arm))
    return lines


def _pointer(reading: LadderReading, arm: str) -> str:
    where = f"At more than one scale, {reading.entry.title}"
    ladder = reading.ladder
    if ladder is None:
        return f"{where}: {arm}: no comparison yet ({'; '.join(reading.notes)})"
    if arm == ladder.baseline:
        return f"{where}: {arm} is the ladder's baseline arm"
    compared = [result.arm for result in ladder.results]
    if arm not in compared:
        return f"{where}: {arm}: no run of it yet"
    headers, rows = result_rows(ladder)  # a row per result, in their order
    row = rows[compared.index(arm)]
    cells = [f"{h}: {cell}" for h, cell in zip(headers[1:], row[1:], strict=True) if cell]
    return f"{where}: {row[0]}: {'; '.join(cells)}"
