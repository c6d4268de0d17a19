"""Tracker and RunHandle against real sqlite MLflow stores: names, batching, statuses, resume,
retry through an outage, spill to the fallback file and `minimind sync`."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

from minimind.cli import main as cli_main
from minimind.foundations.processes import start_time
from minimind.record import HOST_TAG, PID_START_TAG, PID_TAG
from minimind.tracking import RunHandle, Tracker, backend, git_commit
from minimind.tracking.backend import connect, sqlite_db_path, store_problem


@pytest.fixture
def uri(tmp_path: Path, _empty_mlflow_db: Path) -> str:
    db = tmp_path / "store" / "mlflow.db"
    db.parent.mkdir()
    shutil.copy(_empty_mlflow_db, db)
    return f"sqlite:///{db}"


@pytest.fixture
def tracker(uri: str, tmp_path: Path) -> Tracker:
    return Tracker(uri, "exp", fallback_dir=tmp_path / "fallback", flush_interval_s=60.0)


def steps_of(client: MlflowClient, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def closed_port_uri() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_run_layout_params_tags_metrics_and_artifacts(tracker: Tracker, tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = {"train.optimizer.lr": 3e-4, "model.norm": "rmsnorm", "note": None, "long": "x" * 7000}
    parent = tracker.start_parent("norm", {"spec_hash": "abc123"})
    child = tracker.start_child(parent, "norm=rmsnorm/seed1", params, {"seed": 1, "variant": "v"})
    for step in range(1, 31):
        child.log_metrics({"train/loss": 1.0 / step, "opt/lr": torch.tensor(0.5)}, step)
    child.log_metrics({"val/loss": float("nan")}, step=30)
    child.log_text("once upon a time", "samples/generations.txt")
    child.log_dict({"model": {"dim": 64}}, "spec.yaml")
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3])
    child.log_figure(fig, "plots/loss.png")
    plt.close(fig)
    source = tmp_path / "summary.txt"
    source.write_text("42 params")
    child.log_artifact(source)
    source.unlink()  # queued artifacts are copies
    child.end()
    parent.end()

    client = tracker.client
    run = client.get_run(child.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "norm=rmsnorm/seed1"
    assert run.data.tags["mlflow.parentRunId"] == parent.run_id
    assert run.data.tags["minimind.role"] == "child"
    assert run.data.tags["seed"] == "1" and run.data.tags["variant"] == "v"
    assert run.data.params["train.optimizer.lr"] == "0.0003"
    assert run.data.params["note"] == "None"
    assert run.data.params["long"] == "x" * MAX_PARAM_VAL_LENGTH
    assert steps_of(client, child.run_id, "train/loss") == list(range(1, 31))
    history = {m.step: m.value for m in client.get_metric_history(child.run_id, "train/loss")}
    assert history[4] == 0.25
    assert client.get_metric_history(child.run_id, "opt/lr")[0].value == 0.5
    assert math.isnan(client.get_metric_history(child.run_id, "val/loss")[0].value)
    root = {a.path for a in client.list_artifacts(child.run_id)}
    assert root == {"samples", "spec.yaml", "plots", "summary.txt"}
    assert [a.path for a in client.list_artifacts(child.run_id, "plots")] == ["plots/loss.png"]
    spec = Path(client.download_artifacts(child.run_id, "spec.yaml", str(tmp_path)))
    assert spec.read_text() == "model:\n  dim: 64\n"
    # artifacts sit next to the database, not in the working directory
    assert run.info.artifact_uri.startswith(str(Path(tracker.uri[len("sqlite:///") :]).parent))
    parent_run = client.get_run(parent.run_id)
    assert parent_run.data.tags["minimind.role"] == "parent"
    assert parent_run.data.tags["spec_hash"] == "abc123"
    assert not (tmp_path / "fallback").exists()


def test_metrics_are_sent_in_batches(tracker: Tracker) -> None:
    calls: list[int] = []
    log_batch = tracker.client.log_batch

    def spy(run_id, metrics=(), params=(), tags=(), synchronous=None):
        if metrics:
            calls.append(len(metrics))
        return log_batch(run_id, metrics=metrics, params=params, tags=tags, synchronous=synchronous)

    tracker.client.log_batch = spy
    run = tracker.start_child("parent-id", "batched")
    for step in range(100):
        run.log_metrics({"a": step, "b": step, "c": step}, step)
    run.flush()
    assert calls == [300]  # 100 calls, one request

    for step in range(100, 1100):  # past the wake-up threshold and the 1000-point limit
        run.log_metrics({"a": step, "b": step, "c": step}, step)
    run.end()
    assert sum(calls) == 3300 and max(calls) <= 1000 and len(calls) <= 8
    assert steps_of(tracker.client, run.run_id, "b") == list(range(1100))


def test_a_rejected_metric_name_does_not_sink_the_batch(
    tracker: Tracker, capfd: pytest.CaptureFixture[str]
) -> None:
    run = tracker.start_child("parent-id", "bad-name")
    for step in range(5):
        run.log_metrics({"train/loss": 1.0, "bad name!": 2.0, "opt/lr": 0.1}, step)
    run.end()
    assert steps_of(tracker.client, run.run_id, "train/loss") == list(range(5))
    assert steps_of(tracker.client, run.run_id, "opt/lr") == list(range(5))
    assert tracker.client.get_run(run.run_id).info.status == "FINISHED"
    assert capfd.readouterr().err.count("could not record metrics") == 1


def test_exception_ends_run_failed_with_reason(tracker: Tracker) -> None:
    with pytest.raises(ValueError, match="loss is nan"):
        with tracker.start_child("parent-id", "crash") as run:
            run.log_metrics({"train/loss": 1.0}, 1)
            raise ValueError("loss is nan")
    info = tracker.client.get_run(run.run_id)
    assert info.info.status == "FAILED"
    assert info.data.tags["failure_reason"] == "ValueError: loss is nan"
    assert steps_of(tracker.client, run.run_id, "train/loss") == [1]


def test_keyboard_interrupt_ends_run_killed(tracker: Tracker) -> None:
    with pytest.raises(KeyboardInterrupt):
        with tracker.start_parent("interrupted") as run:
            raise KeyboardInterrupt
    info = tracker.client.get_run(run.run_id)
    assert info.info.status == "KILLED"
    assert "KeyboardInterrupt" in info.data.tags["failure_reason"]


def test_explicit_end_is_kept_by_the_context_manager(tracker: Tracker) -> None:
    with tracker.start_child("parent-id", "nan") as run:
        run.end("FAILED", "non-finite loss at step 7")
    info = tracker.client.get_run(run.run_id)
    assert info.info.status == "FAILED"
    assert info.data.tags["failure_reason"] == "non-finite loss at step 7"
    with pytest.raises(RuntimeError):
        run.log_metrics({"a": 1.0}, 1)


def test_sigterm_ends_run_killed(uri: str, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import time
        from minimind.tracking import Tracker, install_termination_handlers
        install_termination_handlers()
        tracker = Tracker({uri!r}, "exp", fallback_dir={str(tmp_path / "fb")!r})
        with tracker.start_parent("victim") as run:
            run.log_metrics({{"train/loss": 2.0}}, 1)
            print(run.run_id, flush=True)
            while True:
                time.sleep(0.05)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    run_id = proc.stdout.readline().strip()
    assert run_id, proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "Terminated: SIGTERM" in stderr
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "KILLED"
    assert run.data.tags["failure_reason"] == "terminated by SIGTERM"
    assert [m.step for m in MlflowClient(uri).get_metric_history(run_id, "train/loss")] == [1]


def test_resume_drops_steps_already_logged(tracker: Tracker) -> None:
    run = tracker.start_child("parent-id", "norm/seed1")
    for step in range(1, 13):  # killed at step 12, last checkpoint at step 8
        run.log_metrics({"train/loss": 10.0 - step}, step)
        if step % 4 == 0:
            run.log_metrics({"val/loss": 20.0 - step}, step)
    run.end("KILLED", "SIGKILL")

    resumed = tracker.resume_run(run.run_id)
    info = tracker.client.get_run(run.run_id)
    assert info.info.status == "RUNNING" and "failure_reason" not in info.data.tags
    assert resumed.name == "norm/seed1"
    for step in range(9, 21):  # recomputed from the checkpoint
        resumed.log_metrics({"train/loss": 10.0 - step, "train/tokens": 64.0 * step}, step)
        if step % 4 == 0:
            resumed.log_metrics({"val/loss": 20.0 - step}, step)
    resumed.end()

    client = tracker.client
    assert client.get_run(run.run_id).info.status == "FINISHED"
    assert steps_of(client, run.run_id, "train/loss") == list(range(1, 21))
    assert steps_of(client, run.run_id, "val/loss") == [4, 8, 12, 16, 20]
    assert steps_of(client, run.run_id, "train/tokens") == list(range(9, 21))


def test_find_parent_children_and_fail_stale_runs(tracker: Tracker) -> None:
    old = tracker.start_parent("first", {"spec_hash": "h1"})
    old.end("KILLED", "SIGTERM")
    parent = tracker.start_parent("second", {"spec_hash": "h1"})
    tracker.start_parent("other", {"spec_hash": "h2"}).end()
    done = tracker.start_child(parent, "a/seed1")
    done.end()
    # a SIGKILLed process: runs created but never ended
    stale = tracker.client.create_run(
        tracker.experiment_id,
        run_name="b/seed1",
        tags={"mlflow.parentRunId": parent.run_id, "minimind.role": "child"},
    )

    assert tracker.find_parent({"spec_hash": "h1"}).info.run_id == parent.run_id
    assert tracker.find_parent({"spec_hash": "h1"}, ["KILLED"]).info.run_id == old.run_id
    assert tracker.find_parent({"spec_hash": "nope"}) is None
    assert {r.info.run_name for r in tracker.children(parent.run_id)} == {"a/seed1", "b/seed1"}
    assert [r.info.run_name for r in tracker.find_runs(name="a/seed1")] == ["a/seed1"]

    ended = tracker.fail_stale_runs(parent.run_id)
    assert set(ended) == {stale.info.run_id, parent.run_id}
    for run_id in ended:
        run = tracker.client.get_run(run_id)
        assert run.info.status == "KILLED" and "SIGKILL" in run.data.tags["failure_reason"]
    assert tracker.client.get_run(done.run_id).info.status == "FINISHED"
    assert tracker.children(parent.run_id, ["RUNNING"]) == []


class FlakyClient:
    """An MlflowClient whose next `log_batch` calls fail: "down" before reaching the store,
    "lost" after the store has written (the response never arrives)."""

    def __init__(self, client: MlflowClient, failures: list[str]) -> None:
        self._client = client
        self.failures = failures

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def log_batch(self, *args, **kwargs):
        mode = self.failures.pop(0) if self.failures else None
        if mode == "down":
            raise MlflowException("Connection refused")  # INTERNAL_ERROR, like a dead server
        result = self._client.log_batch(*args, **kwargs)
        if mode == "lost":
            raise ConnectionResetError("response lost")
        return result


def test_outage_is_retried_without_loss_or_duplicates(
    tracker: Tracker, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run_id = tracker.client.create_run(tracker.experiment_id).info.run_id
    flaky = FlakyClient(tracker.client, ["down", "lost", "down"])
    run = RunHandle(flaky, run_id, outage_s=60, fallback_dir=tmp_path / "fb", flush_interval_s=60)
    for step in range(50):
        run.log_metrics({"train/loss": float(step)}, step)
    run.end()

    history = tracker.client.get_metric_history(run_id, "train/loss")
    assert sorted(m.step for m in history) == list(range(50))
    assert tracker.client.get_run(run_id).info.status == "FINISHED"
    assert flaky.failures == []
    assert run.spilled_to is None and not (tmp_path / "fb").exists()
    err = capfd.readouterr().err
    assert "unreachable" in err and "reachable again" in err


def test_spill_to_fallback_then_sync(
    tracker: Tracker, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run_id = tracker.client.create_run(tracker.experiment_id, run_name="offline").info.run_id
    for step in (0, 1):  # these got out before the outage
        tracker.client.log_metric(run_id, "train/loss", 100.0 + step, step=step)

    run = RunHandle(connect(closed_port_uri()), run_id, outage_s=0.5, fallback_dir=tmp_path / "fb")
    for step in range(10):
        run.log_metrics({"train/loss": 100.0 + step, "opt/lr": 0.1}, step)
    run.log_params({"seed": 3})
    run.log_text("sample", "samples/gen.txt")
    run.end("FAILED", "ValueError: boom")

    path = tmp_path / "fb" / f"{run_id}.jsonl"
    assert run.spilled_to == path and path.exists()
    err = capfd.readouterr().err
    assert err.count(f"minimind sync {path}") == 1

    assert cli_main(["sync", str(path), "--tracking-uri", tracker.uri]) == 0
    out = capfd.readouterr().out
    assert "18 metric points sent, 2 already logged" in out and "run ended FAILED" in out
    client = tracker.client
    run_info = client.get_run(run_id)
    assert run_info.info.status == "FAILED"
    assert run_info.data.tags["failure_reason"] == "ValueError: boom"
    assert run_info.data.params["seed"] == "3"
    assert steps_of(client, run_id, "train/loss") == list(range(10))
    assert steps_of(client, run_id, "opt/lr") == list(range(10))
    assert [a.path for a in client.list_artifacts(run_id, "samples")] == ["samples/gen.txt"]

    # idempotent: a second sync (here through the directory) adds nothing
    assert cli_main(["sync", str(tmp_path / "fb"), "--tracking-uri", tracker.uri]) == 0
    assert "0 metric points sent, 20 already logged" in capfd.readouterr().out
    assert steps_of(client, run_id, "train/loss") == list(range(10))


def test_sync_rejects_other_files(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"hello": 1}) + "\n")
    assert cli_main(["sync", str(other)]) == 2
    assert "not a minimind tracking fallback file" in capfd.readouterr().err
    assert cli_main(["sync", str(tmp_path / "missing.jsonl")]) == 2


def test_sqlite_parent_directory_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sqlite cannot create the directory itself; building the store (seconds) is not under test
    monkeypatch.setattr("mlflow.tracking.MlflowClient", lambda tracking_uri: None)
    monkeypatch.setattr("minimind.tracking.backend._create_sqlite_store", lambda db: None)
    db = tmp_path / "deep" / "er" / "mlflow.db"
    connect(f"sqlite:///{db}")
    assert db.parent.is_dir()
    assert sqlite_db_path("sqlite:///results/mlflow.db") == Path("results/mlflow.db")
    assert sqlite_db_path("http://127.0.0.1:5000") is None


@pytest.mark.parametrize(
    "uri",
    [
        "sqlite:///results/mlflow.db",  # a directory that is still to be made
        "sqlite:///mlflow.db",
        "results/mlruns",
        "file:///tmp/mlruns",
        "http://127.0.0.1:5000",
        "https://mlflow.example.org",
        "databricks",
        "postgresql://mlflow:secret@db.example.org/mlflow",
        "postgresql+psycopg2://mlflow@db.example.org/mlflow",
        "mysql+pymysql://mlflow@db.example.org/mlflow",
        "mssql://mlflow@db.example.org/mlflow",
    ],
)
def test_every_store_mlflow_opens_is_accepted_without_connecting(
    uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert store_problem(uri) is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("uri", ["foo://bar", "s3://bucket/mlruns", "sqlitex:///mlflow.db"])
def test_a_uri_no_store_handles_is_named(uri: str) -> None:
    # the schemes listed are MLflow's registry's, plugins' included
    problem = store_problem(uri)
    assert problem is not None and problem.endswith(" URI")
    assert problem.startswith(f"MLflow has no tracking store for {uri!r}; use a path or a ")
    assert all(scheme in problem for scheme in ("file", "http", "postgresql", "sqlite"))


@pytest.mark.parametrize(
    "uri",
    [
        "results/mlruns",
        "file:///srv/mlruns",
        "http://127.0.0.1:5000",
        "https://mlflow.example.org",
        "sqlite:///results/mlflow.db",
        "postgresql://mlflow@db.example.org/mlflow",
        "mysql://mlflow@db.example.org/mlflow",
        "mssql://mlflow@db.example.org/mlflow",
        "C:\\mlruns",
    ],
)
def test_a_scheme_accepted_without_mlflow_is_one_its_registry_opens(uri: str) -> None:
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    assert backend._has_built_in_scheme(uri)
    assert _tracking_store_registry.get_store_builder(uri) is not None  # raises for none


@pytest.mark.parametrize(
    "uri", ["postgresql+psycopg2://db/mlflow", "databricks://profile", "s3://bucket", "foo://bar"]
)
def test_other_schemes_are_left_to_mlflow_s_registry(uri: str) -> None:
    assert not backend._has_built_in_scheme(uri)


def test_git_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert git_commit() is None
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "init", "-q"], check=True, env=env)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    expected = subprocess.run(
        ["git", "log", "-1", "--format=%H"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert git_commit() == expected and len(expected) == 40


def test_runs_carry_mlflow_s_standard_user_source_and_commit_tags(
    tracker: Tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    import getpass

    monkeypatch.setattr(tracker, "_git_commit", "a" * 40)
    parent = tracker.start_parent("p")
    child = tracker.start_child(parent, "c")
    child.end()
    parent.end()
    for handle in (parent, child):
        tags = tracker.client.get_run(handle.run_id).data.tags
        assert tags["mlflow.user"] == getpass.getuser()
        assert tags["mlflow.source.git.commit"] == tags["git_commit"] == "a" * 40
        assert tags["mlflow.source.name"] and tags["mlflow.source.type"] == "LOCAL"


def test_an_invocation_is_found_by_its_plan_hash_or_the_legacy_tag(tracker: Tracker) -> None:
    from minimind.record import parent_tags, plan_hash_lookups

    legacy = tracker.start_parent("old", {"spec_hash": "h1"})  # recorded by an earlier version
    legacy.end()
    current = tracker.start_parent("new", parent_tags("h2"))
    current.end()
    assert current.run_id != legacy.run_id
    found = {
        plan_hash: next(filter(None, map(tracker.find_parent, plan_hash_lookups(plan_hash))))
        for plan_hash in ("h1", "h2")
    }
    assert found["h1"].info.run_id == legacy.run_id
    assert found["h2"].info.run_id == current.run_id
    assert found["h2"].data.tags["plan_hash"] == "h2"


def test_every_dead_parent_of_the_experiment_is_closed_and_a_reused_pid_is_dead(
    tracker: Tracker,
) -> None:
    """A SIGKILLed invocation of one spec is closed by the next invocation of any spec; a pid
    now held by another process (another start time) does not keep its runs RUNNING."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    me, my_start = str(os.getpid()), start_time(os.getpid())
    dead = tracker.start_parent("a", {"spec_hash": "h1", PID_TAG: str(gone.pid), HOST_TAG: host})
    reused = tracker.start_parent(
        "b", {"spec_hash": "h2", PID_TAG: me, PID_START_TAG: "1", HOST_TAG: host}
    )
    alive = tracker.start_parent(
        "c", {"spec_hash": "h3", PID_TAG: me, PID_START_TAG: my_start, HOST_TAG: host}
    )
    elsewhere = tracker.start_parent("d", {PID_TAG: str(gone.pid), HOST_TAG: "another-host"})
    for handle in (dead, reused, alive, elsewhere):
        handle.flush()

    closed = tracker.close_dead_parents()

    assert sorted(closed) == sorted([dead.run_id, reused.run_id])
    status = {h.run_id: tracker.client.get_run(h.run_id).info.status for h in (alive, elsewhere)}
    assert set(status.values()) == {"RUNNING"}


class DownForCreation:
    """An MlflowClient whose server is down for creating runs (a refused connection)."""

    def __init__(self, client: MlflowClient) -> None:
        self._client = client

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def create_run(self, *args, **kwargs):
        raise MlflowException("Connection refused")  # INTERNAL_ERROR, like a dead server


def test_a_run_created_while_the_server_is_away_trains_into_the_fallback_file_and_syncs(
    tracker: Tracker, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The server dies between two seeds: the next seed's run cannot be created. It records to
    the fallback file like the runs that spilled, and `minimind sync` creates it, once."""
    parent = tracker.start_parent("invocation")
    parent.flush()
    tracker.client = DownForCreation(tracker.client)
    tracker.outage_s = 0.3
    tracker._retry.limit_s = 0.3

    child = tracker.start_child(parent, "v/seed1", {"seed": 1}, {"variant": "v"})
    for step in range(5):
        child.log_metrics({"train/loss": 10.0 - step}, step)
    child.log_text("sample", "samples/gen.txt")
    child.end("FINISHED")
    path = tmp_path / "fallback" / f"{child.run_id}.jsonl"
    assert child.spilled_to == path and path.exists()
    assert f"minimind sync {path}" in capfd.readouterr().err
    tracker.client = tracker.client._client
    assert tracker.children(parent.run_id) == []  # the server never saw it

    for _ in range(2):  # idempotent: the second sync finds the run the first one created
        assert cli_main(["sync", str(path), "--tracking-uri", tracker.uri]) == 0
    (run,) = tracker.children(parent.run_id)
    assert run.info.run_name == "v/seed1" and run.info.status == "FINISHED"
    assert run.data.params["seed"] == "1" and run.data.tags["variant"] == "v"
    assert steps_of(tracker.client, run.info.run_id, "train/loss") == list(range(5))
    assert "0 metric points sent, 5 already logged" in capfd.readouterr().out


def test_the_first_line_of_an_error_never_cuts_a_word_in_two() -> None:
    from minimind.tracking.retry import FIRST_LINE_CHARS, first_line

    words = " ".join(f"word{i:03d}" for i in range(60))  # 479 characters, words of 7
    line = first_line(RuntimeError(words + "\nsecond line"))
    assert line.endswith(" ...") and len(line) <= FIRST_LINE_CHARS + 4
    assert words.startswith(line[: -len(" ...")] + " ")  # ends on a whole word
    assert first_line(RuntimeError("short\nmore")) == "short"
    assert first_line(RuntimeError("")) == "RuntimeError"


def test_a_full_disk_while_creating_the_store_is_one_line_and_leaves_no_store(
    tmp_path: Path,
) -> None:
    """SQLite's own "database or disk is full", from a page limit set on every new connection:
    the schema fails partway, and nothing is left where the store was to be."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from minimind.tracking import TrackingUnreachable

    def tiny_disk(connection: object, record: object) -> None:
        connection.execute("PRAGMA max_page_count = 40")  # type: ignore[attr-defined]

    db = tmp_path / "store" / "mlflow.db"
    uri = f"sqlite:///{db}"
    event.listen(Engine, "connect", tiny_disk)
    try:
        with pytest.raises(TrackingUnreachable) as caught:
            Tracker(uri, "exp", fallback_dir=tmp_path / "fallback")
    finally:
        event.remove(Engine, "connect", tiny_disk)
    message = str(caught.value)
    assert message.startswith(f"tracking.uri: the MLflow store {db} could not be created (")
    assert "full" in message and "\n" not in message
    assert not db.exists() and not list(db.parent.glob("*.partial"))
    assert Tracker(uri, "exp", fallback_dir=tmp_path / "fallback").experiment_id  # space again
