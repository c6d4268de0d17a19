"""The machine's environment a run records: torch's build, read from its configuration text."""

from __future__ import annotations

import torch

from minimind.training.machine import build_summary, environment

CONFIG = """PyTorch built with:
  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64
  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71049cd69a3df32adcccb623b12cd7baa22)
  - CPU capability usage: AVX512
  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, LAPACK_INFO=open, TORCH_VERSION=2.13.0,
"""


def test_the_build_summary_names_blas_lapack_mkl_onednn_and_the_vector_isa() -> None:
    assert build_summary(CONFIG) == (
        "blas=mkl lapack=open mkl=2024.2-Product onednn=v3.12.0 cpu_capability=AVX512"
    )
    assert build_summary("PyTorch built with:\n") == "unknown"


def test_the_environment_has_the_versions_and_this_torch_build() -> None:
    info = environment(torch.device("cpu"))
    assert info["torch"] == torch.__version__
    assert info["build"] == build_summary(torch.__config__.show())
    assert {"python", "numpy", "cpu", "cpu_flags"} <= set(info) and "gpu" not in info
