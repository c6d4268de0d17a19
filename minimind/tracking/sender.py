"""The background thread that delivers one run's operations to MLflow.

The training loop only appends to a deque (no lock, no I/O). The thread wakes every
`flush_interval_s`, or early when the queue grows long or someone flushes, merges consecutive
metric points into `log_batch` calls of up to 1000 points, and sends everything in the order it
was logged. A failed send is retried by the `RetryClock` while later operations wait behind it; if
the outage outlasts the clock's limit, this and every later operation goes to the fallback file.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from mlflow.tracking import MlflowClient
from mlflow.utils.validation import MAX_METRICS_PER_BATCH

from minimind.tracking.fallback import FallbackFile
from minimind.tracking.ops import Op, apply_op
from minimind.tracking.retry import OutageExceeded, RetryClock, notice

# Queue entries:
#   ("m", {key: float}, step, timestamp_ms)  metric values of one step (the hot path)
#   ("op", Op)                               any other operation; an "end" op stops the thread
#   ("flush", threading.Event)               set once everything queued before it is delivered
Entry = tuple[Any, ...]


class Sender:
    def __init__(
        self,
        client: MlflowClient,
        run_id: str,
        retry: RetryClock,
        fallback: FallbackFile,
        flush_interval_s: float = 2.0,
        batch_size: int = MAX_METRICS_PER_BATCH,
        wake_at: int = 512,
        skip_steps: dict[str, set[int]] | None = None,
        spilled: bool = False,
    ) -> None:
        self.run_id = run_id
        self.spilled = spilled  # True: everything goes to the fallback file
        self._client = client
        self._retry = retry
        self._fallback = fallback
        self._flush_interval_s = flush_interval_s
        self._batch_size = min(batch_size, MAX_METRICS_PER_BATCH)
        self._wake_at = wake_at
        self._skip = skip_steps or {}
        self._queue: deque[Entry] = deque()
        self._wake = threading.Event()
        self._reported: set[tuple[str, str]] = set()
        self._thread = threading.Thread(
            target=self._run, name=f"minimind-tracking-{run_id[:8]}", daemon=True
        )
        self._thread.start()

    def put(self, entry: Entry) -> None:
        self._queue.append(entry)
        if len(self._queue) >= self._wake_at:
            self._wake.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything put so far is delivered or spilled; False on timeout."""
        done = threading.Event()
        self._queue.append(("flush", done))
        self._wake.set()
        return self._wait(done, timeout)

    def close(self, end: Op) -> None:
        """Deliver everything, then the `end` operation, and stop the thread.

        An interrupt while waiting (a second Ctrl-C or SIGTERM) stops the retrying: what is still
        undelivered goes to the fallback file, then the interrupt propagates.
        """
        self._queue.append(("op", end))
        self._wake.set()
        try:
            self._thread.join()
        except KeyboardInterrupt:
            notice(f"interrupted while ending run {self.run_id}; saving undelivered records")
            self._retry.give_up.set()
            self._thread.join()
            raise

    def _wait(self, event: threading.Event, timeout: float | None) -> bool:
        # Polls liveness so that a dead thread cannot leave a caller waiting forever.
        waited = 0.0
        while not event.wait(0.5):
            waited += 0.5
            if not self._thread.is_alive() or (timeout is not None and waited >= timeout):
                return event.is_set()
        return True

    def _run(self) -> None:
        try:
            while True:
                self._wake.wait(self._flush_interval_s)
                self._wake.clear()
                if self._drain():
                    return
        except Exception as exc:  # a bug here must not pass silently, nor kill training
            notice(f"delivery thread of run {self.run_id} stopped: {exc!r}")
        finally:
            self._fallback.close()

    def _drain(self) -> bool:
        """Deliver what is queued; True once the end operation is delivered."""
        points: list[list] = []
        while self._queue:
            entry = self._queue.popleft()
            if entry[0] == "m":
                _, values, step, timestamp = entry
                for key, value in values.items():
                    if step not in self._skip.get(key, ()):
                        points.append([key, value, timestamp, step])
                if len(points) >= self._batch_size:
                    self._send_points(points)
                    points = []
                continue
            self._send_points(points)
            points = []
            if entry[0] == "flush":
                self._fallback.flush()
                entry[1].set()
            else:
                self._deliver(entry[1])
                if entry[1]["op"] == "end":
                    return True
        self._send_points(points)
        return False

    def _send_points(self, points: list[list]) -> None:
        for start in range(0, len(points), self._batch_size):
            self._deliver({"op": "metrics", "points": points[start : start + self._batch_size]})

    def _deliver(self, op: Op) -> None:
        if not self.spilled:
            try:
                self._retry.call(lambda: apply_op(self._client, self.run_id, op))
                return
            except OutageExceeded:
                self._spill()
            except Exception as exc:  # permanent: the same call fails again on every retry
                keys = {point[0] for point in op["points"]} if op["op"] == "metrics" else ()
                if len(keys) > 1:  # one rejected key (a bad name) must not sink the others
                    for key in keys:
                        points = [point for point in op["points"] if point[0] == key]
                        self._deliver({"op": "metrics", "points": points})
                else:
                    self._report_dropped(op, exc)
                return
        try:
            self._fallback.append(op)
        except OSError as exc:
            self._report_dropped(op, exc)

    def _spill(self) -> None:
        self.spilled = True
        path = self._fallback.path
        notice(
            f"{self._retry.label} unreachable for more than {self._retry.limit_s:g} s; run "
            f"{self.run_id} goes on training and records to {path}. Once the server is back, "
            f"import it with: minimind sync {path}"
        )

    def _report_dropped(self, op: Op, exc: Exception) -> None:
        key = (op["op"], type(exc).__name__)
        if key not in self._reported:  # once per kind of failure, not once per batch
            self._reported.add(key)
            notice(f"could not record {op['op']} for run {self.run_id}, dropped: {exc}")
