"""`minimind study train --launcher slurm` on a real single-node Slurm (tests/slurm_cluster.py):
stopped mid-way, the study run again collects its jobs and continues, training no run twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from slurm_cluster import slurm_cluster  # noqa: F401  (fixture)

from minimind.foundations.exit_codes import EXIT_INTERRUPTED

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]
TIMEOUT_S = 600
RUNS = 4  # 2 arms x 2 seeds


def child_runs(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tiny")
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], "tags.`minimind.role` = 'child'")


def manifest(tmp_path: Path, spec: Path) -> Path:
    study = {
        "name": "slurmstudy",
        "title": "Norms on Slurm",
        "equivalence_margin": 0.05,
        # One look of the spec's 2 seeds, also the cap: the streams' runs are all it trains
        # (the looks' own runs on Slurm go through the same `run --launcher slurm --resume`).
        "sequential": {"looks": [2]},
        "streams": [[f"minimind run {spec}"]],
        "arms": {
            "rms": {"label": "rmsnorm", "experiment": "tiny", "variant": "norm=rmsnorm"},
            "layer": {"label": "layernorm", "experiment": "tiny", "variant": "norm=layernorm"},
        },
        "axes": [
            {
                "name": "norm",
                "title": "Norm",
                "expected": "about the same",
                "references": ["Zhang & Sennrich 2019"],
                "comparisons": [{"arm": "rms", "against": "layer", "expect": "equal"}],
            }
        ],
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def test_a_stopped_study_collects_its_jobs_and_continues_when_run_again(
    write_spec, mlflow_uri, tmp_path
):
    train = {"steps": 200, "eval_every": 100, "log_every": 20}
    spec = write_spec(seeds=[0, 1], ablate={"model.norm": ["rmsnorm", "layernorm"]}, train=train)
    study_path = manifest(tmp_path, spec)
    command = [sys.executable, "-m", "minimind", "study", "train", str(study_path)]
    command += ["--launcher", "slurm", "-o", f"launcher.folder={tmp_path / 'slurm'}"]
    command += ["--tracking-uri", mlflow_uri]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    study = subprocess.Popen(
        command, cwd=tmp_path, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        finished = [r for r in child_runs(mlflow_uri) if r.info.status == "FINISHED"]
        if finished:
            break
        assert study.poll() is None, study.communicate()[1]
        time.sleep(0.5)
    assert len(finished) < RUNS, "every run finished before the study could be stopped"
    os.killpg(study.pid, signal.SIGINT)  # a terminal's Ctrl-C
    _, err = study.communicate(timeout=TIMEOUT_S)
    assert study.returncode == EXIT_INTERRUPTED, err
    assert "the Slurm jobs go on" in err

    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    log = (tmp_path / "results" / "generated" / "slurmstudy" / "stream1.log").read_text()
    assert "already FINISHED, skipped" in log
    runs = child_runs(mlflow_uri)
    names = sorted(run.info.run_name for run in runs)
    assert len(names) == RUNS and len(set(names)) == RUNS  # none trained twice
    assert {run.info.status for run in runs} == {"FINISHED"}
    # the report reads what the jobs logged
    report = [sys.executable, "-m", "minimind", "study", "report", str(study_path)]
    report += ["--tracking-uri", mlflow_uri, "--report-dir", str(tmp_path / "report")]
    written = subprocess.run(report, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "report" / "report.md").exists()
