"""The run record: names, tags and metric directions, and that readers never parse names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from minimind import record
from minimind.spec import validate_spec
from minimind.training.device import PRECISIONS, RunDevice, precision_name

COMPARE = Path(__file__).resolve().parents[2] / "minimind" / "compare"


def test_run_names() -> None:
    assert record.child_run_name("norm=rmsnorm", 3) == "norm=rmsnorm/seed3"
    assert record.trial_run_name(7, 3, n_seeds=1) == "trial-7"
    assert record.trial_run_name(7, 3, n_seeds=2) == "trial-7/seed3"


def test_device_tags_name_the_resolved_device_and_precision() -> None:
    cpu = torch.device("cpu")
    assert record.device_tags(RunDevice(cpu, None)) == {"device": "cpu", "precision": "fp32"}
    bf16 = RunDevice(cpu, torch.bfloat16)
    assert record.device_tags(bf16) == {"device": "cpu", "precision": "bf16"}


def test_precision_names_have_one_map_for_the_spec_and_the_tags() -> None:
    """`train.precision`'s explicit values and the `precision` tag read the same names."""
    for name, dtype in PRECISIONS.items():
        assert precision_name(dtype) == name
    assert precision_name(None) == "fp32" and precision_name(torch.float16) == "fp16"


def test_device_tags_on_cuda_add_the_gpu_name(monkeypatch) -> None:
    asked = []

    def name(device: torch.device) -> str:
        asked.append(device)
        return "NVIDIA H100 80GB HBM3"

    monkeypatch.setattr(torch.cuda, "get_device_name", name)
    tags = record.device_tags(RunDevice(torch.device("cuda"), torch.bfloat16))
    assert tags == {"device": "cuda", "precision": "bf16", "gpu_name": "NVIDIA H100 80GB HBM3"}
    assert asked == [torch.device("cuda")]


def test_child_tags() -> None:
    spec = validate_spec({"name": "x", "model": {"preset": "tiny", "position": "rope-gptj"}})
    tags = record.child_tags(
        "0123abcd4567",
        "pos=gptj",
        spec.model_config_obj(),
        2,
        RunDevice(torch.device("cpu"), None),
        data_manifest="feedc0de",
    )
    assert tags == {
        "variant": "pos=gptj",
        "seed": "2",
        "plan_hash": "0123abcd4567",
        "data_manifest": "feedc0de",
        "component.norm": "rmsnorm",
        "component.position": "rope",
        "component.position.options": "style=gptj",
        "component.attention": "gqa",
        "component.mlp": "swiglu",
        "component.block": "prenorm",
        "device": "cpu",
        "precision": "fp32",
    }


def test_checkpoint_path() -> None:
    path = record.checkpoint_path("ckpt", "norm", "0123abcd4567", "norm=rmsnorm", 1)
    assert path == Path("ckpt/norm/0123abcd4567/norm=rmsnorm/seed1/last.pt")


@pytest.mark.parametrize("metric", record.RUN_METRICS)
def test_only_throughput_and_mfu_are_maximized(metric: str) -> None:
    assert record.is_maximized(metric) == (metric in ("perf/tokens_per_s", "perf/mfu"))


def _string_constants(path: Path) -> list[str]:
    return [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


@pytest.mark.parametrize("path", sorted(COMPARE.glob("*.py")), ids=lambda p: p.name)
def test_compare_never_parses_a_run_name(path: Path) -> None:
    """Variant and seed come from tags: no module of compare/ uses regular expressions or
    spells out the pieces of a run name."""
    tree = ast.parse(path.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "re" not in imported
    for text in _string_constants(path):
        assert "/seed" not in text and "trial-" not in text, text
