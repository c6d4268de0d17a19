"""The dry run imports neither MLflow nor torch._dynamo (seconds of CPU each): its store check
reads the URI's scheme, and its models on the meta device draw no initial values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from minimind.model.config import ModelConfig
from minimind.model.lm import MiniMindLM
from minimind.model.meta import meta_device

ROOT = Path(__file__).resolve().parents[2]

# Runs the command in a fresh interpreter, then names the heavy modules it imported.
PROBE = """
import sys
from minimind.cli import main
code = main(sys.argv[1:])
print(sorted(m for m in ("mlflow", "torch._dynamo") if m in sys.modules))
sys.exit(code)
"""


def test_the_dry_run_imports_neither_mlflow_nor_dynamo(write_spec) -> None:
    path = write_spec()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "run", str(path), "--dry-run"],
        cwd=path.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "params" in done.stdout  # the plan's table was printed
    assert done.stdout.splitlines()[-1] == "[]"


def test_a_model_built_on_meta_has_the_shapes_of_one_built_anywhere() -> None:
    cfg = ModelConfig(vocab_size=64, dim=32, n_layers=2, n_heads=2, max_seq_len=16)
    with meta_device():
        meta = MiniMindLM(cfg, init_seed=0)
    real = MiniMindLM(cfg, init_seed=0)
    assert all(p.is_meta for p in meta.parameters())
    assert [(n, p.shape) for n, p in meta.named_parameters()] == [
        (n, p.shape) for n, p in real.named_parameters()
    ]
    assert meta.initial_draws == real.initial_draws


def test_a_real_tensor_drawn_inside_the_block_is_still_drawn() -> None:
    t = torch.zeros(1000)
    with meta_device():
        torch.nn.init.normal_(t)
        t.normal_()
    assert t.std() > 0.5
    assert torch.empty(1).device.type == "cpu"  # the meta device ends with its block
