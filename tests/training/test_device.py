"""The run's device and what follows from it: resolution, autocast dtype and context, pinning."""

from __future__ import annotations

import pytest
import torch

from minimind.spec import TrainConfig
from minimind.training import device as device_module
from minimind.training.device import (
    CPU_BF16_MIN_DIM,
    RunDevice,
    autocast,
    autocast_dtype,
    pins_memory,
    resolve_device,
    resolve_run_device,
    synchronize,
)

CPU = torch.device("cpu")


def test_auto_is_the_first_available_kind():
    expected = (
        "cuda"
        if torch.cuda.is_available()
        else "mps"
        if torch.backends.mps.is_available()
        else "cpu"
    )
    assert resolve_device("auto").type == expected
    assert resolve_device("auto", kinds=("cpu", "cuda")).type == "cpu"
    assert resolve_device("cpu").type == "cpu"


def test_an_unavailable_device_is_an_error_that_names_it():
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda' is not available"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="device 'tpu' is not available"):
        resolve_device("tpu")


def test_a_run_device_resolves_the_device_and_its_autocast_dtype_together(monkeypatch):
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: True)
    auto = TrainConfig(device="cpu", precision="auto")
    assert resolve_run_device(auto, CPU_BF16_MIN_DIM) == RunDevice(CPU, torch.bfloat16)
    narrow = resolve_run_device(auto, CPU_BF16_MIN_DIM // 2)
    assert narrow == RunDevice(CPU, None) and narrow.precision == "fp32"
    bf16 = resolve_run_device(TrainConfig(device="cpu", precision="bf16"), 8)
    assert bf16.precision == "bf16"


def test_explicit_precisions():
    assert autocast_dtype("fp32", CPU, 4096) is None
    assert autocast_dtype("bf16", CPU, 8) is torch.bfloat16


WIDE, NARROW = CPU_BF16_MIN_DIM, CPU_BF16_MIN_DIM // 2


@pytest.mark.parametrize(
    ("native", "dim", "expected"),
    [
        (True, WIDE, torch.bfloat16),
        (True, NARROW, None),
        (False, WIDE, None),
        (False, NARROW, None),
    ],
)
def test_auto_precision_is_bf16_on_a_native_bf16_cpu_from_the_measured_width(
    monkeypatch, native, dim, expected
):
    """Below CPU_BF16_MIN_DIM fp32 trains faster on the CPU; without native bf16, always."""
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: native)
    assert autocast_dtype("auto", CPU, dim) is expected
    assert autocast_dtype("fp32", CPU, dim) is None
    assert autocast_dtype("bf16", CPU, dim) is torch.bfloat16


def test_autocast_context_follows_the_dtype():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast(CPU, torch.bfloat16):
        assert torch.is_autocast_enabled("cpu")
        assert (a @ b).dtype == torch.bfloat16
    with autocast(CPU, None):
        assert not torch.is_autocast_enabled("cpu")
        assert (a @ b).dtype == torch.float32


def test_only_cuda_batches_are_pinned():
    assert pins_memory(torch.device("cuda"))
    assert not pins_memory(CPU)
    assert not pins_memory(torch.device("mps"))
    synchronize(CPU)  # nothing to wait for on the CPU, and no error
