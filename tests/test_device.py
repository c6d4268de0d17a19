"""The run's device and what follows from it: resolution, autocast dtype and context, pinning."""

from __future__ import annotations

import pytest
import torch

from minimind import device as device_module
from minimind.device import autocast, autocast_dtype, pins_memory, resolve_device, synchronize

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


def test_explicit_precisions():
    assert autocast_dtype("fp32", CPU) is None
    assert autocast_dtype("bf16", CPU) is torch.bfloat16


@pytest.mark.parametrize(("native", "expected"), [(True, torch.bfloat16), (False, None)])
def test_auto_precision_uses_bf16_only_on_cpus_with_native_bf16(monkeypatch, native, expected):
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: native)
    assert autocast_dtype("auto", CPU) is expected
    assert autocast_dtype("fp32", CPU) is None


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
