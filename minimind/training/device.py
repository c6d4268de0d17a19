"""The device a run trains on, and what follows from it: autocast, synchronisation, pinned batches.

    run_device = resolve_run_device(spec.train, model_cfg.dim)  # once per run, then passed down
    with autocast(run_device.device, run_device.amp_dtype):
        loss = model(x, labels=x).loss

The device and its autocast dtype are resolved once, together, where a run is planned, and
handed to whoever needs them (its tags, the trainer, its batches, the meters), so that every part
of a run agrees on them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

DEVICE_KINDS = ("cuda", "mps", "cpu")
"""The kinds of device a run may use, in the order `auto` prefers them."""


def resolve_device(name: str, kinds: Sequence[str] = DEVICE_KINDS) -> torch.device:
    """`auto` is the first of `kinds` that is available; a named device must be available.

    ValueError names the device when it is not available on this machine.
    """
    available = {
        "cuda": torch.cuda.is_available(),
        "mps": torch.backends.mps.is_available(),
        "cpu": True,
    }
    if name == "auto":
        return torch.device(next(kind for kind in kinds if available.get(kind, False)))
    if not available.get(name, False):
        raise ValueError(f"device {name!r} is not available on this machine")
    return torch.device(name)


def cpu_has_native_bf16() -> bool:
    """True when the CPU computes bf16 matmuls natively (AVX512-BF16 or AMX), read from Linux's
    cpuinfo flags. Without them bf16 autocast is emulated and slower than fp32."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


CPU_BF16_MIN_DIM = 128
"""The model width from which bf16 autocast trains faster than fp32 on a CPU with native bf16.

Measured side by side on a 2-vCPU AMD EPYC (Zen 5, AVX512-BF16) with
`scripts/probes/bf16_crossover.py` (results/benchmarks.md, 'bf16 autocast on the CPU'): bf16 over
fp32 tokens/s was 0.74 to 1.00x at width 32, 0.86 to 1.28x at 64 (depending on the batch), and
1.06 to 1.60x at 128. Narrower models spend their step in casts and elementwise work that
autocast makes slower, not in the matmuls it speeds up; at 64 fp32 is the safe side, and exact.
"""


PRECISIONS: dict[str, torch.dtype | None] = {
    "fp32": None,  # no autocast
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
"""The name of each autocast dtype a run may train in: `train.precision`'s explicit values and the
`precision` tag (`minimind.record.device_tags`)."""


def precision_name(amp_dtype: torch.dtype | None) -> str:
    """`bf16`, `fp16`, or `fp32` for no autocast (`PRECISIONS`)."""
    return next(name for name, dtype in PRECISIONS.items() if dtype == amp_dtype)


def autocast_dtype(precision: str, device: torch.device, model_dim: int) -> torch.dtype | None:
    """The autocast dtype of `train.precision` on `device` for a model `model_dim` wide, or None
    for plain fp32.

    `auto` means bf16 on CUDA, and on CPUs with native bf16 for models at least
    `CPU_BF16_MIN_DIM` wide (below it fp32 is faster); fp32 elsewhere. `fp32` is there for
    bit-exact comparisons across machines.
    """
    if precision != "auto":
        return PRECISIONS[precision]
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if device.type == "cpu" and model_dim >= CPU_BF16_MIN_DIM and cpu_has_native_bf16():
        return torch.bfloat16
    return None


class DeviceSettings(Protocol):
    """What a run's device comes from: the spec's `train.device` and `train.precision`."""

    @property
    def device(self) -> str: ...

    @property
    def precision(self) -> str: ...


@dataclass(frozen=True)
class RunDevice:
    """The device a run trains on and its autocast dtype (None: plain fp32)."""

    device: torch.device
    amp_dtype: torch.dtype | None

    @property
    def precision(self) -> str:
        """The name of `amp_dtype`: `bf16`, or `fp32` without autocast."""
        return precision_name(self.amp_dtype)


def resolve_run_device(train: DeviceSettings, model_dim: int) -> RunDevice:
    """`train.device` resolved on this machine (`resolve_device`) and the autocast dtype of
    `train.precision` there for a model `model_dim` wide (`autocast_dtype`): derived once per run.
    """
    device = resolve_device(train.device)
    return RunDevice(device, autocast_dtype(train.precision, device, model_dim))


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """Autocast to `dtype` on `device` for the body; nothing (plain fp32) when `dtype` is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def synchronize(device: torch.device) -> None:
    """Wait for the kernels queued on `device`, so that a clock read after it charges them to the
    right step (CPU work is done when its call returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def pins_memory(device: torch.device) -> bool:
    """Whether host batches bound for `device` belong in pinned memory: on CUDA, where a pinned
    batch is copied with `non_blocking=True` while the GPU works; elsewhere pinning only costs."""
    return device.type == "cuda"


# fp32 weights, their gradients and AdamW's two moments: the floor of a run's memory before
# activations.
TRAINING_BYTES_PER_PARAM = 16


def device_memory_bytes(device: torch.device) -> int | None:
    """Total memory of `device` (host RAM for the CPU), None where it cannot be read."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type == "cpu":
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None
    return None
