"""The machine a measurement ran on: CPU model and the flags that matter, cores, library versions,
GPU name. Benchmarks and the study's cost bench print it beside their figures."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

# CPU flags that decide which precisions run fast (bf16 autocast needs avx512_bf16 or AMX).
_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8")


def machine_info(device: torch.device) -> dict[str, Any]:
    """CPU model and the flags that matter, core count, library versions, GPU name."""
    model, flags = _cpu_model_and_flags()
    info: dict[str, Any] = {
        "cpu": model,
        "cpu_flags": [flag for flag in _CPU_FLAGS if flag in flags],
        "cpu_count": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],  # other processes competing for the cores
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    return info


def _cpu_model_and_flags() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set[str]()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return model, flags
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            break
    return model, flags
