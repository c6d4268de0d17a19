"""The compile cache across runs (`minimind.training.compile_cache`): a run of a shape that an
earlier run compiled loads its graphs instead of compiling them, with the same losses bit for bit,
and jobs that compile into one cache at once leave it whole.

Each run is a process of its own, as runs and `--jobs` jobs are: torch also keeps compiled code in
memory, which a second run in one process would find without the cache on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minimind.training import compile_cache

REPO = Path(__file__).resolve().parents[2]

# One compiled run of the spec at argv[1] on one thread: its losses and first-step metrics as JSON.
RUN = """
import json, sys
import torch
torch.set_num_threads(1)
from minimind.data import prepare_data
from minimind.spec import load_spec
from minimind.training.device import resolve_run_device
from minimind.training.trainer import Trainer

class Sink:
    def __init__(self):
        self.points = {}
    def log_metrics(self, metrics, step):
        for key, value in metrics.items():
            self.points.setdefault(key, {})[step] = value
    def flush(self, timeout=None):
        return True

spec = load_spec(sys.argv[1])
model_cfg = spec.model_config_obj()
device = resolve_run_device(spec.train, model_cfg.dim)
trainer = Trainer(model_cfg, spec.train, prepare_data(spec.data), 0, device)
sink = Sink()
outcome = trainer.fit(sink)
first = {k: v[1] for k, v in sink.points.items() if k.startswith(("compile/", "time/first"))}
print(json.dumps({"history": outcome.history, "val_loss": outcome.val_loss, "first": first}))
"""


def start_run(spec: Path, cache: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env[compile_cache.COMPILE_CACHE_ENV] = str(cache)
    return subprocess.Popen(
        [sys.executable, "-c", RUN, str(spec)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(process: subprocess.Popen[str]) -> dict:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def compiled_spec(write_spec) -> Path:
    return write_spec(train={"steps": 6, "compile": True, "checkpoint_every": None})


def test_the_cache_folder_is_under_results_unless_the_environment_names_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(compile_cache.COMPILE_CACHE_ENV, raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert compile_cache.use_compile_cache() == tmp_path / "results" / "compile_cache"
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "results" / "compile_cache")
    monkeypatch.setenv(compile_cache.COMPILE_CACHE_ENV, "elsewhere")
    assert compile_cache.use_compile_cache() == tmp_path / "elsewhere"
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "elsewhere")


@pytest.mark.slow
def test_a_second_run_loads_the_first_runs_graphs_and_trains_the_same_numbers(
    compiled_spec, tmp_path
):
    cache = tmp_path / "compile_cache"
    cold = result(start_run(compiled_spec, cache))
    assert any((cache / "fxgraph").rglob("*")), "nothing was saved in the cache folder"
    warm = result(start_run(compiled_spec, cache))
    # A forward and a backward graph: compiled by the first run, loaded by the second.
    assert cold["first"]["compile/cache_misses"] >= 2 and cold["first"]["compile/cache_hits"] == 0
    assert warm["first"]["compile/cache_hits"] == cold["first"]["compile/cache_misses"]
    assert warm["first"]["compile/cache_misses"] == 0
    assert warm["history"] == cold["history"] and warm["val_loss"] == cold["val_loss"]
    assert set(warm["first"]) == {"time/first_step_s", "compile/cache_hits", "compile/cache_misses"}


@pytest.mark.slow
def test_jobs_compiling_into_one_cache_at_once_leave_it_whole(compiled_spec, tmp_path):
    cache = tmp_path / "compile_cache"
    pair = [start_run(compiled_spec, cache) for _ in range(2)]
    first, second = (result(p) for p in pair)
    after = result(start_run(compiled_spec, cache))
    assert after["first"]["compile/cache_misses"] == 0 and after["first"]["compile/cache_hits"] >= 2
    assert first["history"] == second["history"] == after["history"]
    assert first["val_loss"] == second["val_loss"] == after["val_loss"]
