"""When a training run stops, and the horizon its learning-rate schedule decays over.

    budget = TrainingBudget(train.planned_steps, train.time_limit, train.warmup_steps)
    done = budget.advance(step, elapsed_s)      # after every optimizer step

A run stops after `train.steps` (or the steps `train.tokens` makes), or once `train.time_limit`
seconds of training are spent, whichever comes first. With a step budget the schedule's horizon
is that budget; with a time limit alone it is re-estimated after every step from the pace so far,
so that the schedule ends where the time does.
"""

from __future__ import annotations

import math


class TrainingBudget:
    """`max_steps` (None: time alone), `time_limit` in seconds (None: steps alone) and the
    schedule's `horizon` in steps."""

    def __init__(self, max_steps: int | None, time_limit: float | None, warmup: int) -> None:
        self.max_steps = max_steps
        self.time_limit = time_limit
        self.horizon = max_steps or warmup + 1

    def spent(self, step: int, elapsed_s: float) -> bool:
        """Whether a run at `step` after `elapsed_s` seconds of training is done."""
        if self.max_steps is not None and step >= self.max_steps:
            return True
        return self.time_limit is not None and elapsed_s >= self.time_limit

    def advance(self, step: int, elapsed_s: float) -> bool:
        """Account for a finished step (re-estimating the horizon under a time limit alone);
        whether the run is done."""
        if self.max_steps is None and self.time_limit is not None:
            pace = step * self.time_limit / max(elapsed_s, 1e-9)
            self.horizon = max(step + 1, math.ceil(pace))
        return self.spent(step, elapsed_s)
