"""MLflow tracking for minimind runs: batched, asynchronous, and tolerant of server outages.

    tracker = Tracker("sqlite:///results/mlflow.db", "norm-ablation")
    install_termination_handlers()                   # SIGTERM/SIGHUP -> Terminated -> KILLED
    with tracker.start_parent("norm") as parent:
        with tracker.start_child(parent, "norm=rmsnorm/seed1", params, tags) as run:
            run.log_metrics({"train/loss": 3.2}, step=10)   # queued; a background thread sends
            run.flush()                                      # before writing a checkpoint
    # an exception ends the runs FAILED (tag failure_reason), Ctrl-C or SIGTERM KILLED

On `--resume`: `tracker.find_parent(...)`, `tracker.children(...)`, `tracker.resume_run(run_id)`
(drops metric points already logged) and `tracker.fail_stale_runs(parent_id)`. A run whose server
stayed away past the outage limit keeps its records in a fallback file: `minimind sync PATH`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minimind.tracking.fallback import ReplayReport, replay
    from minimind.tracking.lifecycle import (
        Terminated,
        install_termination_handlers,
        run_until_stopped,
    )
    from minimind.tracking.run import RunHandle
    from minimind.tracking.tracker import Tracker, TrackingUnreachable, git_commit

# Each name's module, imported on first use (PEP 562): they import mlflow (seconds), which a
# caller of `minimind.tracking.backend.store_problem` alone (the dry run) does not need.
_HOMES = {
    "ReplayReport": "fallback",
    "replay": "fallback",
    "Terminated": "lifecycle",
    "install_termination_handlers": "lifecycle",
    "run_until_stopped": "lifecycle",
    "RunHandle": "run",
    "Tracker": "tracker",
    "TrackingUnreachable": "tracker",
    "git_commit": "tracker",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


__all__ = [
    "ReplayReport",
    "RunHandle",
    "Terminated",
    "Tracker",
    "TrackingUnreachable",
    "git_commit",
    "install_termination_handlers",
    "replay",
    "run_until_stopped",
]
