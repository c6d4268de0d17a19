"""The machine a measurement ran on: CPU model and the flags that matter, cores, library versions,
GPU name, and the build of torch's numeric libraries. Benchmarks and the study's cost bench print
it beside their figures; every run records `environment` (a run's numbers are bit for bit the
same only on the same CPU family and torch build)."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

import numpy as np
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


def environment(device: torch.device) -> dict[str, str]:
    """What decides a run's numbers besides its spec and seed, as short strings: the versions of
    Python, torch and numpy, torch's BLAS, oneDNN and vectorisation build (`build_summary`), the
    CPU model and its flags that matter, and on CUDA the GPU, its CUDA and cuDNN versions."""
    model, flags = _cpu_model_and_flags()
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "build": build_summary(torch.__config__.show()),
        "cpu": model,
        "cpu_flags": " ".join(flag for flag in _CPU_FLAGS if flag in flags) or "none",
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = str(torch.version.cuda)
        info["cudnn"] = str(torch.backends.cudnn.version())
    return info


# What of `torch.__config__.show()` changes a float: the BLAS and LAPACK libraries, MKL's and
# oneDNN's versions, the vector instructions the kernels were dispatched for.
_BUILD_PATTERNS = (
    ("blas", r"BLAS_INFO=([^,\s]+)"),
    ("lapack", r"LAPACK_INFO=([^,\s]+)"),
    ("mkl", r"Math Kernel Library Version (\S+)"),
    ("onednn", r"(?:MKL-DNN|oneDNN) (v[\d.]+)"),
    ("cpu_capability", r"CPU capability usage: (\S+)"),
)


def build_summary(config: str) -> str:
    """'blas=mkl lapack=mkl mkl=2024.2-Product onednn=v3.12.0 cpu_capability=AVX512' from the
    text of `torch.__config__.show()` (the items it names; 'unknown' when none)."""
    found = [
        f"{name}={match.group(1)}"
        for name, pattern in _BUILD_PATTERNS
        if (match := re.search(pattern, config))
    ]
    return " ".join(found) or "unknown"


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
