"""A plugin component as the README describes it, written outside the repository: its interface
is checked when the spec is validated (one line naming the field, exit 2), and a plugin that has
it trains."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

import registry
import registry.core
from minimind import MiniMindLM, ModelConfig

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny ops, one thread

GEGLU = """
import torch
import torch.nn.functional as F
from dataclasses import dataclass
from torch import nn

import registry
from registry.mlp import MLP


@registry.register("mlp", "{name}")
class GeGLU({base}):
    @dataclass(frozen=True)
    class Options:
        hidden: int = 64

    def __init__(self, options, *, dim{dropout}):
        super().__init__()
        self.gate_up = nn.Linear(dim, 2 * options.hidden, bias=False)
        self.down_proj = nn.Linear(options.hidden, dim, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down_proj(F.gelu(gate) * up)
"""

MODEL = {"dim": 32, "n_layers": 2, "n_heads": 2, "vocab_size": 320, "max_seq_len": 16}


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made in a test disappear after it."""
    snapshot = {slot: dict(names) for slot, names in registry.core._names.items()}
    monkeypatch.setattr(registry.core, "_names", snapshot)


def write_plugin(folder: Path, module: str, **fields: str) -> None:
    fields = {"name": "geglu", "base": "MLP", "dropout": ", dropout=0.0", **fields}
    (folder / f"{module}.py").write_text(textwrap.dedent(GEGLU.format(**fields)))


def dry_run(folder: Path, module: str) -> subprocess.CompletedProcess[str]:
    """`python -m minimind run spec.yaml --dry-run` in `folder`, which holds the plugin module:
    the working directory is on the import path of `python -m` (last)."""
    spec = {
        "name": "plugin",
        "plugins": [module],
        "model": {**MODEL, "mlp": "geglu"},
        "data": {"tokenizer": {"vocab_size": 320}},
        "train": {"seq_len": 16},
    }
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PYTHONSAFEPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "minimind", "run", "spec.yaml", "--dry-run"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )


def test_a_plugin_mlp_lacking_aux_loss_is_refused_at_validation(tmp_path):
    write_plugin(tmp_path, "lab_geglu", base="nn.Module")
    done = dry_run(tmp_path, "lab_geglu")
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(
        "error: model.mlp: plugin mlp 'geglu' (lab_geglu.GeGLU) lacks 'aux_loss'"
    )
    assert "subclass registry.mlp.MLP" in line


def test_a_plugin_whose_constructor_the_model_cannot_call_is_refused(tmp_path):
    write_plugin(tmp_path, "lab_geglu_nodrop", dropout="")
    done = dry_run(tmp_path, "lab_geglu_nodrop")
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "model.mlp: plugin mlp 'geglu'" in line
    assert "GeGLU(options, dim=..., dropout=...)" in line
    assert "dropout" in line.rsplit(":", 1)[1]


def test_a_plugin_mlp_on_the_base_passes_the_dry_run(tmp_path):
    write_plugin(tmp_path, "lab_geglu_ok")
    done = dry_run(tmp_path, "lab_geglu_ok")
    assert done.returncode == 0, done.stderr


def test_a_plugin_mlp_on_the_base_trains(tmp_path, monkeypatch, scratch_registry):
    write_plugin(tmp_path, "lab_geglu_train", name="geglu-train")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.load_plugins(["lab_geglu_train"])
    config = ModelConfig(**MODEL, mlp={"name": "geglu-train", "hidden": 48})
    model = MiniMindLM(config, init_seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 320, (2, 16), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(2):
        out = model(ids, labels=ids)
        assert out.loss is not None
        assert out.aux_loss.item() == 0.0  # the base's: no auxiliary loss
        (out.loss + out.aux_loss).backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(out.loss.item())
    assert losses[1] < losses[0]
    assert model.moe_load() is None
    monkeypatch.delitem(sys.modules, "lab_geglu_train")


def test_a_plugin_block_must_declare_what_the_model_reads(tmp_path, monkeypatch, scratch_registry):
    (tmp_path / "lab_block.py").write_text(
        textwrap.dedent(
            """
            from torch import nn
            import registry

            @registry.register("block", "bare")
            class Bare(nn.Module):
                final_norm = True

                def __init__(self, *, attention, mlp, norm):
                    super().__init__()
                    self.attn, self.mlp = attention, mlp

                def forward(self, x, rotate, cache=None, doc_mask=None):
                    return x + self.mlp(x + self.attn(x, rotate, cache, doc_mask))
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.load_plugins(["lab_block"])
    with pytest.raises(ValueError, match="lacks 'n_norms'.*subclass registry.block.Block"):
        ModelConfig(**MODEL, block="bare")
    monkeypatch.delitem(sys.modules, "lab_block")
