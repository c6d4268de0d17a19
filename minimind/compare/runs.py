"""Loading the runs to compare from MLflow: which runs, their final values, their histories.

Runs are selected and labelled by the tags of `minimind.record`: a parent run per invocation
tagged `minimind.role=parent`, children tagged `mlflow.parentRunId`, `variant` and `seed`. A run's
name is shown, never parsed.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import Run, ViewType
from mlflow.exceptions import MlflowException

from minimind.foundations.errors import MinimindError
from minimind.foundations.exit_codes import EXIT_BAD_INPUT
from minimind.foundations.redact import without_password
from minimind.record import (
    LEGACY_HASH_TAG,
    PARENT_ROLE,
    PARENT_TAG,
    PLAN_HASH_TAG,
    ROLE_TAG,
    RUN_NAME_TAG,
    SEED_TAG,
    VARIANT_TAG,
)
from minimind.spec.naming import check_name
from minimind.tracking.backend import StoreMissing, connect_existing

HISTORY_WORKERS = 16
ALL_RUNS = "all runs"
"""The selection of `load_runs(all_runs=True)` with no filter: every child run of the experiments."""


class CompareError(MinimindError):
    """A comparison that cannot be made; `exit_code` is `EXIT_BAD_INPUT` for usage errors,
    `EXIT_FAILED` otherwise."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class RunSet:
    """The runs of one comparison, and their metric histories, fetched when first needed.

    `runs` has one row per child run, with the columns of `mlflow.search_runs` (`run_id`,
    `status`, `start_time`, `end_time`, `metrics.<key>` (the last value), `params.<key>`,
    `tags.<key>`) plus `run_name`, `variant` and `seed`; `parents` has the parent runs.
    """

    runs: pd.DataFrame
    parents: pd.DataFrame
    experiments: list[str]
    selection: str
    tracking_uri: str
    client: MlflowClient = field(repr=False)
    _histories: dict[tuple[str, str], pd.Series] = field(default_factory=dict, repr=False)
    _fetched: set[str] = field(default_factory=set, repr=False)

    @property
    def store(self) -> str:
        """Where the runs were read from, as a report may show it: `tracking_uri` without its
        password."""
        return without_password(self.tracking_uri)

    def fetch_histories(self, keys: Sequence[str]) -> None:
        """Fetch the histories of `keys` not fetched yet, for every run, in one parallel batch."""
        missing = [k for k in dict.fromkeys(keys) if k not in self._fetched]
        if missing and len(self.runs):
            self._histories.update(fetch_histories(self.client, self.runs, missing))
        self._fetched.update(missing)

    def subset(self, keep: pd.Series) -> RunSet:
        """The runs where `keep` (a boolean per row of `runs`) holds, with the histories
        fetched so far (a key fetched for every run is fetched for these)."""
        return RunSet(
            self.runs[keep.to_numpy()].reset_index(drop=True),
            self.parents,
            self.experiments,
            self.selection,
            self.tracking_uri,
            self.client,
            dict(self._histories),
            set(self._fetched),
        )

    def history(self, run_id: str, key: str) -> pd.Series:
        """The points of one metric of one run: values indexed by step, sorted by step."""
        self.fetch_histories([key])
        return self._histories.get((run_id, key), pd.Series(dtype=float))


def open_client(tracking_uri: str) -> MlflowClient:
    """A client on `tracking_uri` (`tracking.backend.connect_existing`: a SQLite store that does
    not exist is refused, not made)."""
    try:
        return connect_existing(tracking_uri)
    except StoreMissing as exc:
        raise CompareError(f"{exc}; run `minimind run SPEC` first or pass --tracking-uri") from exc


def resolve_experiments(client: MlflowClient, names: Sequence[str]) -> list[str]:
    """Check that every experiment exists; an unknown one is an error listing those that do."""
    unknown = [n for n in names if client.get_experiment_by_name(n) is None]
    if unknown:
        existing = sorted(e.name for e in client.search_experiments())
        listed = ", ".join(existing) if existing else "(none)"
        raise CompareError(f"unknown experiment {', '.join(unknown)}; experiments: {listed}")
    return list(names)


INFO_COLUMNS = ("run_id", "experiment_id", "status", "artifact_uri", "start_time", "end_time")


def _search(
    client: MlflowClient, experiments: Sequence[str] | None, filter_string: str = ""
) -> pd.DataFrame:
    """The active runs of `experiments` (every active experiment when None) that match
    `filter_string`, oldest first, one row each in the columns of `mlflow.search_runs`, which
    reads MLflow's global tracking URI instead of `client`'s."""
    if experiments:
        found = [client.get_experiment_by_name(name) for name in experiments]
        ids = [e.experiment_id for e in found if e is not None]
    else:
        ids = [e.experiment_id for e in client.search_experiments(ViewType.ACTIVE_ONLY)]
    runs: list[Run] = []
    token = None
    while ids:
        try:
            page = client.search_runs(
                ids, filter_string, order_by=["attributes.start_time ASC"], page_token=token
            )
        except MlflowException as e:
            raise CompareError(f"invalid --filter {filter_string!r}: {e.message}") from e
        runs += page
        token = page.token
        if not token:
            break
    return _frame(runs)


def _frame(runs: Sequence[Run]) -> pd.DataFrame:
    """`runs` as `mlflow.search_runs` lays them out: the run's info, then `metrics.<key>` (NaN
    where a run has not logged it), `params.<key>` and `tags.<key>` (None where missing); a
    run of an earlier version has its plan hash copied from the legacy tag to its own."""
    rows = [
        {
            "run_id": run.info.run_id,
            "experiment_id": run.info.experiment_id,
            "status": run.info.status,
            "artifact_uri": run.info.artifact_uri,
            "start_time": pd.to_datetime(run.info.start_time, unit="ms", utc=True),
            "end_time": pd.to_datetime(run.info.end_time, unit="ms", utc=True),
            **{f"metrics.{key}": value for key, value in run.data.metrics.items()},
            # A store written before URIs were recorded without their passwords may hold one.
            **{f"params.{key}": without_password(v) for key, v in run.data.params.items()},
            **{f"tags.{key}": value for key, value in run.data.tags.items()},
        }
        for run in runs
    ]
    frame = pd.DataFrame(rows, columns=None if rows else list(INFO_COLUMNS))
    legacy, own = f"tags.{LEGACY_HASH_TAG}", f"tags.{PLAN_HASH_TAG}"
    if legacy in frame.columns:  # runs of earlier versions: their plan hash under its old tag
        frame[own] = frame.get(own, frame[legacy]).fillna(frame[legacy])
    for column in frame.columns:
        if column.startswith(("params.", "tags.")):
            frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame


def _tag(df: pd.DataFrame, key: str) -> pd.Series:
    column = f"tags.{key}"
    if column in df.columns:
        return df[column]
    return pd.Series([None] * len(df), index=df.index, dtype=object)


def _label(df: pd.DataFrame) -> pd.DataFrame:
    """Add `run_name`, `variant` and `seed` columns from the runs' tags. A run without a
    `variant` tag (not written by minimind) is a variant of its own, named by its run name; one
    without a `seed` tag has no seed (NaN)."""
    df = df.copy()
    # MLflow gives a column of only unfinished runs' end times (None) as tz-naive NaT beside
    # tz-aware start times; one time zone for both keeps durations computable.
    for column in ("start_time", "end_time"):
        if column in df.columns:
            df[column] = pd.to_datetime(df[column], utc=True)
    df["run_name"] = _tag(df, RUN_NAME_TAG).fillna(df["run_id"])
    df["variant"] = _tag(df, VARIANT_TAG).fillna(df["run_name"]).astype(str)
    df["seed"] = pd.to_numeric(_tag(df, SEED_TAG), errors="coerce")
    return df.reset_index(drop=True)


def select_runs(
    client: MlflowClient,
    experiments: Sequence[str] | None,
    *,
    all_runs: bool = False,
    filter_string: str = "",
    parent_run_id: str | None = None,
    spec_hash: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The child runs to compare, the parent runs they belong to, and a line saying which and
    why.

    By default, the children of the latest parent run by start time (the last `minimind run`
    invocation, whatever its spec or status); with `all_runs` or a filter, every matching run;
    with `parent_run_id`, that invocation's children; with `spec_hash` (a prefix of the
    `plan_hash` tag, the hash of the whole spec an invocation ran), the latest invocation of
    that spec (`CompareError` when none has it). Experiments that hold runs but no parent run
    fall back to all their runs. The four ways of choosing exclude one another (`CompareError`).
    """
    given = [
        option
        for option, value in (
            ("--all", all_runs),
            ("--filter", filter_string),
            ("--parent", parent_run_id is not None),
            ("--spec-hash", spec_hash is not None),
        )
        if value
    ]
    if len(given) > 1:
        raise CompareError(f"{' and '.join(given)} choose the runs in different ways: give one")
    if parent_run_id is not None:
        quoted = parent_run_id.replace("'", "")
        children = _search(client, experiments, f"tags.`{PARENT_TAG}` = '{quoted}'")
        parents = _search(client, experiments, f"attributes.run_id = '{quoted}'")
        if parents.empty:
            raise CompareError(f"no parent run {parent_run_id} in {', '.join(experiments or [])}")
        return _label(children), parents, f"{_invocation(parents.iloc[0], 'invocation')} (--parent)"
    df = _search(client, experiments, filter_string)
    if df.empty and spec_hash is not None:
        raise _no_invocation_of(spec_hash, experiments)
    if df.empty:
        return (
            df,
            df,
            "no run matched the filter" if filter_string else "the store holds no runs there",
        )
    is_parent = _tag(df, ROLE_TAG) == PARENT_ROLE
    children, parents = df[~is_parent], df[is_parent]
    if filter_string or all_runs or (parents.empty and spec_hash is None):
        what = f"runs matching {filter_string!r}" if filter_string else ALL_RUNS
        return _label(children), parents, what
    why = "the most recent by start time; --parent or --spec-hash choose another"
    if spec_hash is not None:
        hashes = _tag(parents, PLAN_HASH_TAG).fillna("").astype(str)
        parents = parents[hashes.str.startswith(spec_hash)]
        if parents.empty:
            raise _no_invocation_of(spec_hash, experiments)
        why = f"the most recent with spec hash {spec_hash}"
    latest = parents.sort_values("start_time").iloc[[-1]]
    mine = _tag(children, PARENT_TAG) == latest["run_id"].iloc[0]
    return (
        _label(children[mine]),
        latest,
        f"{_invocation(latest.iloc[0], 'latest invocation')} ({why})",
    )


def _no_invocation_of(spec_hash: str, experiments: Sequence[str] | None) -> CompareError:
    return CompareError(
        f"--spec-hash: no invocation of a spec hash starting {spec_hash!r} "
        f"in {', '.join(experiments or ['any experiment'])}"
    )


def _invocation(parent: pd.Series, what: str) -> str:
    """'latest invocation norm (2024-05-01 12:00, parent run 1a2b..., spec 3c4d5e6f,
    KILLED)'."""
    name = parent.get(f"tags.{RUN_NAME_TAG}") or parent["run_id"]
    when = pd.Timestamp(parent["start_time"]).strftime("%Y-%m-%d %H:%M")
    spec = parent.get(f"tags.{PLAN_HASH_TAG}")
    details = [when, f"parent run {parent['run_id']}"]
    details += [f"spec {str(spec)[:8]}"] if isinstance(spec, str) and spec else []
    details += [str(parent["status"])] if parent.get("status", "FINISHED") != "FINISHED" else []
    return f"{what} {name} ({', '.join(details)})"


def fetch_histories(
    client: MlflowClient, runs: pd.DataFrame, keys: Sequence[str]
) -> dict[tuple[str, str], pd.Series]:
    """Every logged point of `keys` for `runs`, by (run_id, key): values indexed by step.

    One `get_metric_history` request per run × key, run on a thread pool (the SQLite driver
    and the network release the GIL). Only keys that a run has logged are requested. A step
    logged twice keeps its last value.
    """
    jobs = [
        (run_id, key)
        for key in keys
        if f"metrics.{key}" in runs.columns
        for run_id in runs.loc[runs[f"metrics.{key}"].notna(), "run_id"]
    ]

    def fetch(job: tuple[str, str]) -> pd.Series:
        points = sorted(client.get_metric_history(*job), key=lambda m: (m.step, m.timestamp))
        by_step = {m.step: m.value for m in points}  # the last of equal steps wins
        return pd.Series(by_step, dtype=float).rename_axis("step")

    with ThreadPoolExecutor(max_workers=HISTORY_WORKERS) as pool:
        return dict(zip(jobs, pool.map(fetch, jobs), strict=True))


def _store_name(name: str) -> str:
    """An experiment name read from the store, checked as a spec's name is (`check_name`): it
    names the report's folder, so a name like `../../x` must not lead outside it."""
    try:
        return check_name(name)
    except ValueError as err:
        raise CompareError(f"experiment name in the store: {err}") from None


def load_runs(
    tracking_uri: str,
    experiments: Sequence[str] | None = None,
    *,
    all_runs: bool = False,
    filter_string: str = "",
    parent_run_id: str | None = None,
    spec_hash: str | None = None,
    client: MlflowClient | None = None,
) -> RunSet:
    """The runs to compare and their parents; histories are fetched when first needed.
    `client`: one already open on `tracking_uri` (a second selection from the same store), else
    one is opened."""
    client = open_client(tracking_uri) if client is None else client
    if experiments:
        experiments = resolve_experiments(client, experiments)
    runs, parents, selection = select_runs(
        client,
        experiments,
        all_runs=all_runs,
        filter_string=filter_string,
        parent_run_id=parent_run_id,
        spec_hash=spec_hash,
    )
    if not experiments:
        ids = set(runs.get("experiment_id", [])) | set(parents.get("experiment_id", []))
        experiments = sorted(_store_name(client.get_experiment(i).name) for i in ids)
    return RunSet(runs, parents, list(experiments), selection, tracking_uri, client)
