"""`minimind run --jobs N`: each job's place (GPUs faked), the same numbers as a serial run, and
what a stop leaves: Ctrl-C ends every run KILLED, a killed job's run is never left RUNNING while
the other jobs train on, and `--resume` finishes them with the serial run's numbers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_runs import children, curves
from mlflow.tracking import MlflowClient

from minimind.cli import main
from minimind.run.jobs import check_placement, place
from minimind.spec import SpecError
from minimind.spec.launcher import LauncherConfig

ARMS = {"model.norm": ["rmsnorm", "layernorm"]}
# Long enough that a job is still training when the test stops it, with checkpoints to resume.
LONG_TRAIN = {"steps": 3000, "checkpoint_every": 20, "eval_every": 1000, "log_every": 50}
TIMEOUT_S = 600


def test_jobs_spread_over_the_gpus_before_doubling_up() -> None:
    launcher = LauncherConfig(jobs=4, jobs_per_gpu=2)
    gpus = ["3", "5"]
    assert [place(slot, launcher, gpus, cores=16).gpu for slot in range(4)] == ["3", "5", "3", "5"]
    assert place(0, launcher, gpus, cores=16).threads == 4  # an equal share of the cores
    check_placement(launcher, gpus)
    with pytest.raises(SpecError, match=r"^launcher\.jobs: 4 jobs do not fit 2 GPU"):
        check_placement(LauncherConfig(jobs=4, jobs_per_gpu=1), gpus)


def test_on_a_cpu_each_job_gets_its_share_of_the_cores_or_threads_per_job() -> None:
    assert place(1, LauncherConfig(jobs=3), [], cores=8) == place(0, LauncherConfig(jobs=3), [], 8)
    assert place(1, LauncherConfig(jobs=3), [], cores=8).gpu is None
    assert place(1, LauncherConfig(jobs=3), [], cores=8).threads == 2
    assert place(0, LauncherConfig(jobs=4), [], cores=2).threads == 1  # never none
    assert place(0, LauncherConfig(jobs=2, threads_per_job=3), [], cores=2).threads == 3
    check_placement(LauncherConfig(jobs=64), [])  # no GPU: any number of jobs


def test_jobs_is_a_local_launcher_option(write_spec, capsys) -> None:
    spec = write_spec()
    assert main(["run", str(spec), "--jobs", "2", "--launcher", "slurm"]) == 2
    assert main(["run", str(spec), "--jobs", "0"]) == 2
    assert main(["run", str(spec), "-o", "launcher.jobs_per_gpu=0"]) == 2
    err = capsys.readouterr().err
    assert "launcher.jobs: several runs at once go with the local launcher" in err
    assert "--jobs must be >= 1" in err and "launcher.jobs_per_gpu" in err


def without_experiment(run) -> dict[str, str]:
    """A run's params but the experiment's name, which tells the two invocations apart."""
    return {k: v for k, v in run.data.params.items() if k != "tracking.experiment"}


def start(spec: Path, *extra: str) -> subprocess.Popen:
    """`minimind run SPEC --jobs 2` in its own process (so that a test can stop it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "minimind", "run", str(spec), "--jobs", "2", *extra]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(process: subprocess.Popen) -> tuple[int, str]:
    out, _ = process.communicate(timeout=TIMEOUT_S)
    return process.returncode, out


def wait_for_checkpoints(folder: Path, count: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while len(list(folder.glob("**/last.pt"))) < count:
        assert time.monotonic() < deadline, "the jobs wrote no checkpoints"
        time.sleep(0.2)


def job_pids(parent: int) -> list[int]:
    """The pool's workers: the spawned children of `parent` (not its resource tracker)."""
    found = subprocess.run(
        ["ps", "-ww", "-o", "pid=,args=", "--ppid", str(parent)], capture_output=True, text=True
    ).stdout
    return [int(line.split()[0]) for line in found.splitlines() if "spawn_main" in line]


@pytest.mark.slow
def test_two_jobs_give_the_serial_runs_numbers_bit_for_bit(
    write_spec, mlflow_uri, one_thread, capsys
) -> None:
    spec = write_spec(seeds=[0, 1], ablate=ARMS)
    assert main(["run", str(spec), "-o", "tracking.experiment=serial"]) == 0
    capsys.readouterr()
    jobs = ["--jobs", "2", "-o", "launcher.threads_per_job=1", "-o", "tracking.experiment=jobs"]
    assert main(["run", str(spec), *jobs]) == 0
    out = capsys.readouterr().out
    assert "training 4 run(s) in 2 jobs" in out and "variant" in out  # the comparison table
    serial, parallel = children(mlflow_uri, "serial"), children(mlflow_uri, "jobs")
    assert sorted(serial) == sorted(parallel) and len(serial) == 4
    parents = {run.data.tags["mlflow.parentRunId"] for run in parallel.values()}
    assert len(parents) == 1
    for name, run in parallel.items():
        assert run.info.status == "FINISHED"
        assert curves(mlflow_uri, run) == curves(mlflow_uri, serial[name]), name
        assert without_experiment(run) == without_experiment(serial[name]), name
    assert main(["run", str(spec), *jobs, "--resume"]) == 0
    assert capsys.readouterr().out.count("already FINISHED, skipped") == 4


@pytest.mark.slow
def test_ctrl_c_ends_every_job_killed_and_resume_finishes_them_bit_for_bit(
    write_spec, mlflow_uri, tmp_path, one_thread, capsys
) -> None:
    spec = write_spec(seeds=[0, 1], train=LONG_TRAIN)
    process = start(spec, "-o", "tracking.experiment=jobs")
    wait_for_checkpoints(tmp_path / "checkpoints", 2)
    process.send_signal(signal.SIGINT)  # to the parent alone: it passes the stop on
    code, out = finish(process)
    assert code == 130, out
    assert out.count("interrupted; continue with --resume") == 1
    assert "Traceback" not in out, out
    runs = children(mlflow_uri, "jobs")
    assert len(runs) == 2 and {run.info.status for run in runs.values()} == {"KILLED"}
    parent_id = {run.data.tags["mlflow.parentRunId"] for run in runs.values()}.pop()
    assert MlflowClient(mlflow_uri).get_run(parent_id).info.status == "KILLED"

    code, out = finish(start(spec, "-o", "tracking.experiment=jobs", "--resume"))
    assert code == 0, out
    assert main(["run", str(spec), "-o", "tracking.experiment=serial"]) == 0
    serial, resumed = children(mlflow_uri, "serial"), children(mlflow_uri, "jobs")
    for name, run in resumed.items():
        assert run.info.run_id == runs[name].info.run_id and run.info.status == "FINISHED"
        assert curves(mlflow_uri, run) == curves(mlflow_uri, serial[name]), name


@pytest.mark.slow
def test_a_job_killed_with_sigkill_costs_its_own_run_alone_and_resume_finishes_it(
    write_spec, mlflow_uri, tmp_path
) -> None:
    spec = write_spec(seeds=[0, 1], train=LONG_TRAIN)
    process = start(spec, "-o", "tracking.experiment=jobs")
    wait_for_checkpoints(tmp_path / "checkpoints", 2)
    workers = job_pids(process.pid)
    assert workers, "no job process found"
    os.kill(workers[0], signal.SIGKILL)
    code, out = finish(process)
    assert code == 1, out
    runs = children(mlflow_uri, "jobs")
    assert len(runs) == 2  # the killed job's run ended KILLED; the other job trained on
    assert sorted(run.info.status for run in runs.values()) == ["FINISHED", "KILLED"]
    reasons = [run.data.tags.get("failure_reason", "") for run in runs.values()]
    assert any("its job process died" in reason for reason in reasons), reasons

    code, out = finish(start(spec, "-o", "tracking.experiment=jobs", "--resume"))
    assert code == 0, out
    for name, run in children(mlflow_uri, "jobs").items():
        assert run.info.run_id == runs[name].info.run_id and run.info.status == "FINISHED"
