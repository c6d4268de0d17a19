"""The tracker on every rank of a multi-process run: only rank 0 talks to MLflow.

    tracker = make_tracker(spec.tracking.uri, spec.tracking.experiment)   # on every rank

In one process `make_tracker` gives the plain `Tracker`. Under torchrun every rank gets a
`RankZeroTracker`: rank 0 holds the real tracker, the answers that steer the run loop (earlier
runs, new run ids) are broadcast from it, and the other ranks log into `NullRunHandle`s. So all
ranks walk the same runs in lockstep and no collective waits for a rank that took another branch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from minimind.tracking.run import RunHandle
from minimind.tracking.tracker import Tracker
from minimind.training.distributed import main_answer, world_size


class NullRunHandle:
    """A run handle of a rank other than 0: knows rank 0's run id, logs nothing."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        pass

    def log_text(self, text: str, artifact_file: str) -> None:
        pass

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        pass

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        pass

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def end(self, status: str = "FINISHED", reason: str | None = None) -> None:
        pass

    def __enter__(self) -> NullRunHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


class RankZeroTracker:
    """The runner's `Tracker` on every rank of a DDP run: rank 0 holds the real one; the answers
    that steer the run loop (earlier runs, new run ids) are broadcast from it, and the other
    ranks' handles are `NullRunHandle`s. Every method must be called on all ranks in order."""

    def __init__(self, uri: str, experiment: str) -> None:
        self.uri = uri
        self.experiment = experiment
        self._tracker: Tracker | None = None

        def connect() -> None:
            self._tracker = Tracker(uri, experiment)

        main_answer(connect)

    @property
    def _main_tracker(self) -> Tracker:
        """The tracker, which only the main rank has (the others never call this)."""
        assert self._tracker is not None, "only the main rank connects"
        return self._tracker

    def _handle(self, start: Callable[[Tracker], RunHandle]) -> RunHandle | NullRunHandle:
        handle: RunHandle | None = None

        def start_on_main() -> str:
            nonlocal handle
            handle = start(self._main_tracker)
            return handle.run_id

        run_id = main_answer(start_on_main)
        return handle if handle is not None else NullRunHandle(run_id)

    def start_parent(self, *args: Any, **kwargs: Any) -> RunHandle | NullRunHandle:
        return self._handle(lambda t: t.start_parent(*args, **kwargs))

    def start_child(self, parent: Any, *args: Any, **kwargs: Any) -> RunHandle | NullRunHandle:
        return self._handle(lambda t: t.start_child(parent, *args, **kwargs))

    def resume_run(self, run_id: str) -> RunHandle | NullRunHandle:
        return self._handle(lambda t: t.resume_run(run_id))

    def find_parent(self, *args: Any, **kwargs: Any) -> Any:
        return main_answer(lambda: self._main_tracker.find_parent(*args, **kwargs))

    def children(self, *args: Any, **kwargs: Any) -> Any:
        return main_answer(lambda: self._main_tracker.children(*args, **kwargs))

    def fail_stale_runs(self, *args: Any, **kwargs: Any) -> Any:
        return main_answer(lambda: self._main_tracker.fail_stale_runs(*args, **kwargs))

    def close_dead_parents(self, *args: Any, **kwargs: Any) -> Any:
        return main_answer(lambda: self._main_tracker.close_dead_parents(*args, **kwargs))


def make_tracker(uri: str, experiment: str) -> Tracker | RankZeroTracker:
    """A `Tracker` in one process, a `RankZeroTracker` on each rank of a DDP run."""
    if world_size() > 1:
        return RankZeroTracker(uri, experiment)
    return Tracker(uri, experiment)
