"""The Slurm launcher's logic without a cluster: the spec section and its errors, the dry run's job
list, the shared-store rule, submitit's parameters, the queue, the ledger, the job callable."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from minimind.cli import main
from minimind.record import SLURM_JOB_TAG, slurm_job_tags
from minimind.run.cluster import slurm
from minimind.run.cluster.job import MinimindJob
from minimind.spec import flatten, load_spec, spec_hash
from minimind.spec.launcher import LauncherConfig

ARMS = {"model.norm": ["rmsnorm", "layernorm"]}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("launcher.name=slurmm", "launcher.name: unknown value 'slurmm'; choices: local, slurm"),
        ("launcher.timeout_min=0", "launcher.timeout_min: "),
        ("launcher.gpus_per_node=-1", "launcher.gpus_per_node: "),
        ("launcher.mem_gb=true", "launcher.mem_gb: "),
        ("launcher.partiton=gpu", "launcher.partiton: "),
        (
            "launcher.additional_parameters={array: 0-3}",
            "launcher.additional_parameters.array: --array is set by the launcher itself",
        ),
        (
            "launcher.additional_parameters={--qos: high}",
            "launcher.additional_parameters.--qos: write the option without its dashes: qos",
        ),
    ],
)
def test_a_bad_launcher_setting_is_one_line_naming_its_field_and_exits_2(
    write_spec, capsys, override: str, message: str
):
    argv = ["run", str(write_spec()), "-o", "launcher.name=slurm", "-o", override, "--dry-run"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_the_dry_run_lists_one_job_per_variant_and_seed_with_its_resources(write_spec, capsys):
    spec = write_spec(seeds=[0, 1], ablate=ARMS)
    overrides = ["launcher.partition=gpu", "launcher.gpus_per_node=1", "launcher.mem_gb=16"]
    overrides += ["launcher.additional_parameters={account: lab}"]
    argv = ["run", str(spec), "--launcher", "slurm", "--dry-run", "--nproc", "2"]
    assert main([*argv, *(f"-o{o}" for o in overrides)]) == 0
    jobs = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  job ")]
    names = [line.split()[1].rstrip(":") for line in jobs]
    assert names == [f"norm={n}/seed{s}" for n in ("rmsnorm", "layernorm") for s in (0, 1)]
    assert all(
        line.endswith(
            "partition gpu, 1 CPU(s), 1 GPU(s), 16 GB, 60 min, 2 processes (torchrun), "
            "--account=lab"
        )
        for line in jobs
    ), jobs


def test_the_launcher_changes_neither_the_spec_hash_nor_the_params(write_spec):
    path = write_spec(ablate=ARMS)
    local, remote = (
        load_spec(path),
        load_spec(path, ["launcher.name=slurm", "launcher.cpus_per_task=4"]),
    )
    assert spec_hash(local) == spec_hash(remote)
    assert flatten(local) == flatten(remote)
    assert not [key for key in flatten(remote) if key.startswith("launcher")]


def test_a_file_store_is_shared_only_on_a_cluster_of_this_host_alone():
    here = socket.gethostname().split(".")[0]
    launcher = LauncherConfig(name="slurm", partition="gpu")
    one_node = slurm.shared_store_problem("sqlite:///x.db", launcher, lambda p: [here])
    assert one_node is None
    problem = slurm.shared_store_problem("sqlite:///x.db", launcher, lambda p: [here, "n2"])
    assert problem is not None and "partition gpu" in problem and "postgresql://" in problem
    assert slurm.shared_store_problem("results/mlruns", launcher, lambda p: ["n1"]) is not None
    for shared in ("postgresql://u@db/mlflow", "http://mlflow:5000"):
        assert slurm.shared_store_problem(shared, launcher, lambda p: ["n1", "n2"]) is None


def test_a_multi_node_launch_refuses_a_sqlite_store_before_any_work(
    write_spec, capsys, monkeypatch
):
    monkeypatch.setattr(slurm, "require_submitit", lambda: None)
    monkeypatch.setattr(slurm, "partition_nodes", lambda partition: ["node1", "node2"])
    spec = write_spec()
    assert main(["run", str(spec), "--launcher", "slurm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: tracking.uri: sqlite:///") and err.count("\n") == 1
    assert "cannot share" in err
    assert not (spec.parent / "mlflow.db").exists()  # nothing written


def test_a_launch_without_submitit_says_how_to_install_it(write_spec, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "submitit" else real(name, *a)
    )
    assert main(["run", str(write_spec()), "--launcher", "slurm"]) == 2
    assert "error: launcher.name: slurm needs submitit: pip install" in capsys.readouterr().err


def test_a_job_option_alone_is_refused(write_spec, capsys):
    assert main(["run", str(write_spec()), "--parent-run", "abc"]) == 2
    assert "--parent-run and --only go together" in capsys.readouterr().err


def test_the_launcher_settings_become_submitits_sbatch_parameters(tmp_path, monkeypatch):
    submitit = pytest.importorskip("submitit")
    launcher = LauncherConfig(
        name="slurm",
        partition="gpu",
        timeout_min=30,
        cpus_per_task=8,
        gpus_per_node=2,
        mem_gb=1.5,
        array_parallelism=4,
        additional_parameters={"account": "lab"},
    )
    parameters = slurm.executor_parameters(launcher, "norm")
    assert parameters["mem"] == "1536MB" and parameters["time"] == 30
    fake_srun = tmp_path / "bin" / "srun"  # submitit looks for srun before it accepts a job
    fake_srun.parent.mkdir()
    fake_srun.write_text("#!/bin/sh\n")
    fake_srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_srun.parent}:{os.environ['PATH']}")
    executor = submitit.SlurmExecutor(folder=tmp_path / "%j")
    executor.update_parameters(**parameters)  # submitit's own check of each name
    assert executor.parameters["gpus_per_node"] == 2
    assert executor.parameters["additional_parameters"] == {"account": "lab"}


def fake_slurm(bin_dir: Path, sbatch: str) -> None:
    """A one-node Slurm of shell scripts in `bin_dir` (put first on PATH): `sbatch` runs the
    shell text `sbatch` ($1: the batch script), `squeue` lists no job (each has ended)."""
    bin_dir.mkdir()
    scripts = {
        "srun": "",
        "squeue": "",
        "sinfo": f"echo {socket.gethostname()}\n",
        "sbatch": sbatch,
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + text)
        (bin_dir / name).chmod(0o755)


def keeping_sbatch(kept: Path) -> str:
    """An `sbatch` that appends each batch script it is given to `kept` and accepts it as the
    next job id (1, 2, ...)."""
    count = kept.with_suffix(".count")
    return (
        f'cat "$1" >> {kept}\nn=$(( $(cat {count} 2>/dev/null || echo 0) + 1 ))\n'
        f"echo $n > {count}\necho Submitted batch job $n\n"
    )


def parent_runs(uri: str, experiment: str) -> list[object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return client.search_runs([found.experiment_id], "tags.`minimind.role` = 'parent'")


INJECTED = "debug\ntouch PWNED\n#"


@pytest.mark.parametrize(
    ("launcher", "field"),
    [
        ({"partition": INJECTED}, "launcher.partition"),
        (
            {"additional_parameters": {"comment\ntouch PWNED\n#x": "1"}},
            "launcher.additional_parameters",
        ),  # fmt: skip
        (
            {"additional_parameters": {"comment": INJECTED}},
            "launcher.additional_parameters.comment",
        ),  # fmt: skip
        (
            {"additional_parameters": {"account": "lab;touch PWNED"}},
            "launcher.additional_parameters.account",
        ),  # fmt: skip
        ({"additional_parameters": {"qos": "a b"}}, "launcher.additional_parameters.qos"),
        (
            {"additional_parameters": {"exclusive": False}},
            "launcher.additional_parameters.exclusive",
        ),  # fmt: skip
        ({"folder": "/tmp/slurm\ntouch PWNED"}, "launcher.folder"),
    ],
)
def test_no_launcher_setting_writes_a_line_into_the_batch_script(
    write_spec, mlflow_uri, tmp_path, monkeypatch, capsys, launcher, field
):
    pytest.importorskip("submitit")
    kept = tmp_path / "scripts.sh"
    fake_slurm(tmp_path / "bin", keeping_sbatch(kept))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    spec = write_spec(launcher={"folder": str(tmp_path / "slurm"), **launcher})
    assert main(["run", str(spec), "--launcher", "slurm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}: ") and err.count("\n") == 1, err
    assert not kept.exists()  # nothing submitted
    assert parent_runs(mlflow_uri, "tiny") == [] and not (tmp_path / "slurm").exists()


def test_the_batch_script_holds_each_launcher_setting_on_its_own_line(
    write_spec, mlflow_uri, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("submitit")
    kept = tmp_path / "scripts.sh"
    fake_slurm(tmp_path / "bin", keeping_sbatch(kept))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    options = {"account": "lab", "qos": "normal", "comment": "two words' worth", "exclusive": True}
    spec = write_spec(
        launcher={
            "partition": "gpu,debug",
            "folder": str(tmp_path / "slurm"),
            "additional_parameters": options,
        }
    )
    assert main(["run", str(spec), "--launcher", "slurm"]) == 1  # the fake jobs never ran
    lines = kept.read_text().splitlines()
    for line in [
        "#SBATCH --partition=gpu,debug",
        "#SBATCH --account=lab",
        "#SBATCH --qos=normal",
        "#SBATCH --comment='two words'\"'\"' worth'",
        "#SBATCH --exclusive",
    ]:
        assert line in lines


def test_jobs_sbatch_refuses_are_one_line_naming_the_launcher_and_exit_2(
    write_spec, mlflow_uri, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("submitit")
    refusing = "echo 'sbatch: error: invalid partition specified: gpuu' >&2\nexit 1\n"
    fake_slurm(tmp_path / "bin", refusing)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    spec = write_spec(launcher={"partition": "gpuu", "folder": str(tmp_path / "slurm")})
    assert main(["run", str(spec), "--launcher", "slurm"]) == 2
    err = capsys.readouterr().err
    refused = (
        "error: launcher: sbatch refused the jobs: sbatch: error: invalid partition specified: "
        "gpuu\n"
    )
    assert err.endswith(refused)
    # No parent run (nor its spec file) stays behind from a submission that did not happen.
    assert parent_runs(mlflow_uri, "tiny") == []
    assert list((tmp_path / "slurm").glob("specs/*")) == []
    sweep = {
        "trials": 1,
        "storage": f"sqlite:///{tmp_path}/optuna.db",
        "params": {"train.optimizer.lr": {"type": "float", "low": 1e-3, "high": 2e-2}},
    }
    spec = write_spec(sweep=sweep, launcher={"partition": "gpuu", "folder": str(tmp_path / "s")})
    assert main(["sweep", str(spec), "--launcher", "slurm"]) == 2  # its worker jobs alike
    assert capsys.readouterr().err.endswith(refused)


def test_two_resumes_with_other_seeds_keep_one_spec_file_each(
    write_spec, mlflow_uri, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("submitit")
    from submitit.core.utils import DelayedSubmission

    fake_slurm(tmp_path / "bin", keeping_sbatch(tmp_path / "scripts.sh"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    folder = tmp_path / "slurm"
    spec = str(write_spec(launcher={"folder": str(folder)}))
    for seed in (0, 1):  # one parent (seeds leave the plan's hash), each its own seed's jobs
        assert main(["run", spec, "--launcher", "slurm", "--resume", "-o", f"seeds=[{seed}]"]) == 1
    assert len(parent_runs(mlflow_uri, "tiny")) == 1
    for job_id, seed in (("1", 0), ("2", 1)):
        with open(folder / job_id / f"{job_id}_submitted.pkl", "rb") as handle:
            submission = pickle.load(handle)
        assert isinstance(submission, DelayedSubmission)
        argv = submission.function.argv
        assert argv[-1] == f"--only=base/seed{seed}"
        assert load_spec(argv[1]).seeds == [seed]


def test_the_queue_reads_squeue_and_a_job_gone_from_it_has_ended(monkeypatch):
    listed = "12_0|RUNNING\n12_1|PENDING\n13|CANCELLED\n"
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        return SimpleNamespace(stdout=listed)

    monkeypatch.setattr(subprocess, "run", fake_run)
    states = slurm.queue_states(["12_0", "12_1", "13", "14"])
    assert states == {"12_0": "RUNNING", "12_1": "PENDING", "13": "CANCELLED", "14": slurm.GONE}
    assert calls[0][:2] == ["squeue", "-h"] and "-r" in calls[0]  # array tasks one per line


def test_waiting_ends_when_every_job_has_left_the_live_states(monkeypatch):
    rounds = iter(
        [
            {"1": "PENDING", "2": "RUNNING"},
            {"1": "RUNNING", "2": "COMPLETED"},
            {"1": "REQUEUED"},  # a requeued job is waited for
            {"1": slurm.GONE},
        ]
    )
    monkeypatch.setattr(slurm, "queue_states", lambda ids: next(rounds))
    ended = []
    states = slurm.wait(["1", "2"], lambda job, state: ended.append(job), poll_s=0)
    assert states == {"1": slurm.GONE, "2": "COMPLETED"} and ended == ["2", "1"]


def test_waiting_asks_again_when_squeue_fails_and_gives_up_after_its_patience(monkeypatch):
    timed_out = subprocess.CalledProcessError(1, ["squeue"], stderr="Socket timed out\n")
    answers = iter([timed_out, timed_out, {"1": "COMPLETED"}])

    def queue_states(ids):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(slurm, "queue_states", queue_states)
    assert slurm.wait(["1"], poll_s=0) == {"1": "COMPLETED"}

    def never(ids):
        raise timed_out

    monkeypatch.setattr(slurm, "queue_states", never)
    with pytest.raises(subprocess.CalledProcessError):
        slurm.wait(["1"], poll_s=0, patience_s=0)


def test_the_ledger_keeps_job_ids_and_tells_the_live_ones(tmp_path, monkeypatch):
    ledger = slurm.Ledger.open(tmp_path, "parent1")
    ledger.record({"a/seed0": "5_0", "a/seed1": "5_1", "b/seed0": "5_2"})
    again = slurm.Ledger.open(tmp_path, "parent1")
    assert again.jobs == ledger.jobs
    monkeypatch.setattr(
        slurm, "queue_states", lambda ids: {"5_0": "RUNNING", "5_1": "COMPLETED", "5_2": "GONE"}
    )
    assert again.live(["a/seed0", "a/seed1", "b/seed0", "c/seed0"]) == {"a/seed0": "5_0"}


def test_a_job_runs_its_command_and_fails_with_it():
    assert MinimindJob(["registry", "norm"])() == 0
    with pytest.raises(RuntimeError, match="minimind run exited with code 2"):
        MinimindJob(["run", "missing.yaml"])()


def test_the_checkpoint_stops_the_command_and_requeues_the_same_job():
    pytest.importorskip("submitit")
    job = MinimindJob(["run", "spec.yaml", "--only=a/seed0"])
    job._process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # As in the job: the warning signal interrupts `__call__`'s `Popen.wait`, which holds this lock.
    with job._process._waitpid_lock:
        started = time.monotonic()
        requeued = job.checkpoint()
    assert time.monotonic() - started < 30
    with pytest.raises(ProcessLookupError):
        os.kill(job._process.pid, 0)  # ended and reaped
    assert isinstance(requeued.function, MinimindJob) and requeued.function.argv == job.argv
    assert pickle.loads(pickle.dumps(job)).argv == job.argv  # the process is not pickled


def test_a_run_in_a_slurm_job_is_tagged_with_its_job(monkeypatch):
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert slurm_job_tags() == {}
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    assert slurm_job_tags() == {SLURM_JOB_TAG: "41"}
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "40")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert slurm_job_tags() == {SLURM_JOB_TAG: "40_3"}


def test_job_resources_read_as_the_dry_run_prints_them():
    launcher = LauncherConfig(name="slurm")
    assert (
        slurm.resources(launcher)
        == "partition (default), 1 CPU(s), 0 GPU(s), default memory, 60 min"
    )
    assert Path(LauncherConfig().folder) == Path("results/generated/slurm")


def test_a_slurm_that_does_not_answer_is_one_line(write_spec, capsys, monkeypatch):
    monkeypatch.setattr(slurm, "require_submitit", lambda: None)

    def failing(command, **kwargs):
        raise subprocess.CalledProcessError(1, command, stderr="sinfo: error: no controller\n")

    monkeypatch.setattr(subprocess, "run", failing)
    assert main(["run", str(write_spec()), "--launcher", "slurm"]) == 2
    err = capsys.readouterr().err
    assert err == "error: launcher.partition: sinfo failed: sinfo: error: no controller\n"


def test_a_multi_node_sweep_refuses_stores_the_worker_jobs_cannot_share(
    write_spec, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(slurm, "require_submitit", lambda: None)
    monkeypatch.setattr(slurm, "partition_nodes", lambda partition: ["node1", "node2"])
    sweep = {"params": {"train.optimizer.lr": {"type": "float", "low": 1e-3, "high": 1e-2}}}
    sweep["storage"] = f"sqlite:///{tmp_path}/optuna.db"
    spec = write_spec(sweep=sweep, tracking={"uri": "http://127.0.0.1:9"})
    assert main(["sweep", str(spec), "--launcher", "slurm"]) == 2
    err = capsys.readouterr().err  # the tracking server passes; the sqlite storage does not
    assert err.startswith("error: sweep.storage: sqlite:///") and err.count("\n") == 1, err
    assert not (tmp_path / "optuna.db").exists()  # refused before the storage is opened


def test_a_job_for_a_run_the_spec_does_not_have_is_one_line(write_spec, mlflow_uri, capsys):
    argv = ["run", str(write_spec()), "--parent-run", "p", "--only", "base/seed9"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == "error: --only: no run base/seed9 in spec tiny; runs: base/seed0\n"


def test_a_multi_process_job_becomes_torchrun_with_its_run_and_parent(write_spec, monkeypatch):
    from minimind.training import distributed

    relaunched = []
    monkeypatch.setattr(
        distributed, "launch", lambda n, argv, verbose=False: relaunched.append((n, argv))
    )
    spec = str(write_spec())
    main(["run", spec, "--parent-run", "p1", "--only", "base/seed0", "--nproc", "2"])
    ((nproc, argv),) = relaunched
    assert nproc == 2 and argv[:2] == ["run", spec]
    assert argv[-2:] == ["--parent-run=p1", "--only=base/seed0"]


LR = {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}
WARMUP = {"type": "int", "low": 0, "high": 4, "step": 2}


def test_the_sweep_dry_run_lists_the_space_and_one_job_per_worker_and_writes_nothing(
    write_spec, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the default reports and Slurm folders are relative
    sweep = {"trials": 5, "params": {"train.optimizer.lr": LR, "train.schedule.warmup": WARMUP}}
    sweep["storage"] = f"sqlite:///{tmp_path}/optuna.db"
    spec = write_spec(sweep=sweep, ablate=ARMS)
    argv = ["sweep", str(spec), "--launcher", "slurm", "--workers", "3", "--dry-run"]
    assert main([*argv, "-o", "launcher.partition=gpu", "-o", "launcher.mem_gb=8"]) == 0
    out = capsys.readouterr().out.splitlines()
    studies = [line for line in out if line.startswith("study ")]
    assert [line.split()[1].rstrip(":") for line in studies] == [
        f"{spec.stem}/norm={n}" for n in ("rmsnorm", "layernorm")
    ]
    assert all("5 finished trials" in line and "at most 3 Slurm job(s)" in line for line in studies)
    assert "  train.optimizer.lr: float in [0.001, 0.01], log scale" in out
    assert "  train.schedule.warmup: int in [0, 4] by 2" in out
    jobs = [line.strip() for line in out if line.strip().startswith("job ")]
    resources = "partition gpu, 1 CPU(s), 0 GPU(s), 8 GB, 60 min"
    assert jobs == 2 * [f"job worker {i}: {resources}" for i in range(3)], out
    assert sorted(p.name for p in tmp_path.iterdir()) == [spec.name]  # no optuna.db, mlflow.db


def test_a_local_sweep_dry_run_lists_worker_processes_and_no_jobs(write_spec, tmp_path, capsys):
    sweep = {"trials": 2, "params": {"train.optimizer.lr": LR}}
    sweep["storage"] = f"sqlite:///{tmp_path}/optuna.db"
    spec = write_spec(sweep=sweep)
    assert main(["sweep", str(spec), "--workers", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "at most 2 worker process(es)" in out and "Slurm" not in out  # no more than trials
    assert not (tmp_path / "optuna.db").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_sweep_dry_run_still_refuses_a_bad_spec(write_spec, tmp_path, capsys):
    spec = write_spec(sweep={"params": {"train.optimizer.lr": LR}})
    assert main(["sweep", str(spec), "--workers", "0", "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("error: sweep.workers: must be > 0")


STUDY_MANIFEST = Path(__file__).resolve().parents[2] / "experiments" / "study" / "study.yaml"


def test_the_study_dry_run_lists_each_streams_commands_as_launched(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the stream logs would go under results/ here
    argv = ["study", "train", str(STUDY_MANIFEST), "--dry-run", "--launcher", "slurm"]
    assert main([*argv, "-o", "launcher.partition=gpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    launched = "--launcher slurm --override=launcher.partition=gpu"
    assert out[0].startswith("stream 1: ")
    commands = [line.strip() for line in out if line.startswith("  ")]
    runs = [c for c in commands if c.startswith("python -m minimind run ")]
    assert runs and all(c.endswith(f"{launched} --resume --restart") for c in runs), runs
    best = [c for c in commands if c.endswith("--best")]
    assert best and all("--launcher" not in c for c in best)  # reads the storage, trains nothing
    assert list(tmp_path.iterdir()) == []


def test_a_run_its_ended_job_left_running_is_ended_killed_with_the_job_and_state(
    write_spec, mlflow_uri, tmp_path, capsys
):
    from minimind.record import FAILURE_REASON_TAG
    from minimind.run.plan import plan_run
    from minimind.run.slurm_run import _report_failures
    from minimind.tracking import Tracker

    plan = plan_run(load_spec(str(write_spec(launcher={"folder": str(tmp_path / "slurm")}))))
    tracker = Tracker(mlflow_uri, "onslurm")
    parent = tracker.start_parent("tiny")
    child = tracker.start_child(parent, "base/seed0")  # its job's process was SIGKILLed
    ledger = slurm.Ledger.open(plan.spec.launcher.folder, parent.run_id)
    ledger.record({"base/seed0": "8_0"})  # a later --resume gave it another job: left alone
    _report_failures(tracker, plan, parent.run_id, {"base/seed0": "7_0"}, {"7_0": "FAILED"})
    assert tracker.client.get_run(child.run_id).info.status == "RUNNING"
    ledger.record({"base/seed0": "7_0"})
    capsys.readouterr()
    failed = _report_failures(
        tracker, plan, parent.run_id, {"base/seed0": "7_0"}, {"7_0": "OUT_OF_MEMORY"}
    )
    assert failed == ["base/seed0"]
    run = tracker.client.get_run(child.run_id)
    assert run.info.status == "KILLED"
    assert run.data.tags[FAILURE_REASON_TAG] == (
        "its Slurm job 7_0 ended OUT_OF_MEMORY while the run was RUNNING"
    )
    assert "base/seed0: job 7_0 ended OUT_OF_MEMORY, run KILLED (its Slurm job" in (
        capsys.readouterr().out
    )


def test_a_local_multi_process_run_of_a_slurm_spec_keeps_its_launcher_in_the_ranks(
    write_spec, monkeypatch
):
    from minimind.training import distributed

    relaunched = []
    monkeypatch.setattr(
        distributed, "launch", lambda n, argv, verbose=False: relaunched.append((n, argv))
    )
    spec = str(write_spec(launcher={"name": "slurm"}))
    main(["run", spec, "--launcher", "local", "--nproc", "2"])
    ((_, argv),) = relaunched
    assert "--override=launcher.name=local" in argv
    ranks_spec = load_spec(
        argv[1], [a.removeprefix("--override=") for a in argv[2:] if a.startswith("--override=")]
    )
    assert ranks_spec.launcher.name == "local"  # the ranks train, none submits
