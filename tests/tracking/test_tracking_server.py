"""A real `mlflow server` on loopback, stopped in the middle of two runs and started again: the
run with a long outage limit retries and loses nothing; the one with a short limit spills to its
fallback file, and `minimind sync` completes it. No step is lost or duplicated in either."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from minimind.cli import main as cli_main
from minimind.tracking import Tracker

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.uri = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 180.0) -> None:
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.root / 'server.db'}",
            "--artifacts-destination",
            str(self.root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
        log = (self.root / "server.log").open("a")
        # Its own process group: the server forks workers, and stop() must take them all.
        self.proc = subprocess.Popen(
            command, cwd=self.root, stdout=log, stderr=log, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"mlflow server exited: {(self.root / 'server.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        pytest.fail("mlflow server did not come up")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


@pytest.fixture
def server(tmp_path: Path):
    server = MlflowServer(tmp_path, free_port())
    server.start()
    yield server
    server.stop()


def log_steps(runs, steps: range, pause_s: float = 0.0) -> None:
    for step in steps:
        for run in runs:
            run.log_metrics({"train/loss": 1.0 / (step + 1), "train/tokens": 64.0 * step}, step)
        time.sleep(pause_s)


def test_server_outage(
    server: MlflowServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    fallback = tmp_path / "fallback"
    patient = Tracker(
        server.uri, "outage", outage_s=300, fallback_dir=fallback, flush_interval_s=0.2
    )
    hasty = Tracker(server.uri, "outage", outage_s=1, fallback_dir=fallback, flush_interval_s=0.2)
    parent = patient.start_parent("outage")
    retried = patient.start_child(parent, "retried", {"lr": 0.1})
    spilled = hasty.start_child(parent, "spilled", {"lr": 0.1})
    runs = (retried, spilled)

    log_steps(runs, range(0, 100))
    for run in runs:
        run.flush()
    server.stop()
    log_steps(runs, range(100, 200), pause_s=0.05)  # about 5 s of training while it is down
    server.start()
    log_steps(runs, range(200, 300))
    retried.log_text("sample", "samples/gen.txt")
    spilled.log_text("sample", "samples/gen.txt")
    for run in (*runs, parent):
        run.end()

    assert retried.spilled_to is None
    assert spilled.spilled_to == fallback / f"{spilled.run_id}.jsonl"
    client = patient.client
    assert client.get_run(spilled.run_id).info.status == "RUNNING"  # until synced
    capfd.readouterr()  # the links MLflow printed for the runs this test ended itself
    assert cli_main(["sync", str(fallback)]) == 0
    out = capfd.readouterr().out
    assert "run ended FINISHED" in out
    assert "View run" not in out  # MLflow's links, printed as each run ends, stay out (no -v)

    for run in runs:
        info = client.get_run(run.run_id)
        assert info.info.status == "FINISHED"
        for key in ("train/loss", "train/tokens"):
            steps = [m.step for m in client.get_metric_history(run.run_id, key)]
            assert sorted(steps) == list(range(300)), (run.name, key)
        assert [a.path for a in client.list_artifacts(run.run_id, "samples")] == ["samples/gen.txt"]


def test_minimind_run_survives_a_server_outage(server: MlflowServer, write_spec) -> None:
    """`minimind run` of a tiny spec against the server, which is stopped for about 10 s while
    the run trains: the run finishes, and every metric step arrives exactly once."""
    steps, log_every = 2000, 10
    path = write_spec(
        tracking={"uri": server.uri},
        train={"steps": steps, "log_every": log_every, "eval_every": 100, "checkpoint_every": None},
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "minimind", "run", str(path)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    client = Tracker(server.uri, "tiny").client
    try:
        deadline = time.monotonic() + 300
        while not _child_has_metrics(client):  # training has started and is being logged
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "no metrics within 300 s"
            time.sleep(0.2)
        server.stop()
        time.sleep(10)
        assert process.poll() is None, "the run ended before the outage was over"
        server.start()
        assert process.wait(timeout=600) == 0, process.stderr.read().decode()
        log = process.stderr.read().decode()
        assert "unreachable" in log and "reachable again" in log, log  # it saw the outage
    finally:
        process.kill()
        process.wait()
        process.stderr.close()

    (child,) = client.search_runs(
        [client.get_experiment_by_name("tiny").experiment_id],
        "tags.`minimind.role` = 'child'",
    )
    assert child.info.status == "FINISHED"
    logged = [m.step for m in client.get_metric_history(child.info.run_id, "train/loss")]
    assert sorted(logged) == list(range(log_every, steps + 1, log_every))


def _child_has_metrics(client) -> bool:
    experiment = client.get_experiment_by_name("tiny")
    if experiment is None:
        return False
    children = client.search_runs([experiment.experiment_id], "tags.`minimind.role` = 'child'")
    return bool(children) and bool(children[0].data.metrics)


def test_a_server_gone_before_the_comparison_skips_it_and_the_run_exits_0(
    server: MlflowServer, write_spec, monkeypatch, capsys
) -> None:
    """The server stops after the runs trained and ended: the run exits 0, says the comparison
    was skipped, and prints the `minimind sync` command, instead of a traceback and exit 1."""
    import minimind.compare

    path = write_spec(tracking={"uri": server.uri, "experiment": "gone"})
    real = minimind.compare.print_comparison

    def stop_then_compare(*args, **kwargs) -> None:
        server.stop()
        real(*args, **kwargs)

    monkeypatch.setattr(minimind.compare, "print_comparison", stop_then_compare)
    assert cli_main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"comparison skipped: the tracking server {server.uri} did not answer" in out
    assert "minimind sync results/tracking-fallback/" in out
