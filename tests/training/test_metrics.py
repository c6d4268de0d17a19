"""Throughput accounting (with a fake clock), peak memory, peak FLOP/s lookup and cache, MFU and
MoE load balance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from minimind.training import metrics
from minimind.training.metrics import (
    ThroughputMeter,
    device_peak_flops,
    known_gpu_peak_flops,
    load_cv,
    measured_matmul_peak,
    mfu,
    peak_memory_mb,
    reset_peak_memory,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_step(meter: ThroughputMeter, clock: FakeClock, seconds: float, tokens: int) -> float:
    meter.start_step()
    clock.now += seconds
    return meter.end_step(tokens)


def test_throughput_excludes_warmup_and_evaluation() -> None:
    clock = FakeClock()
    meter = ThroughputMeter(warmup_steps=2, clock=clock)
    assert math.isnan(meter.tokens_per_s) and math.isnan(meter.step_ms)
    assert run_step(meter, clock, 9.0, 100) == 9000.0  # compile step
    run_step(meter, clock, 5.0, 100)
    assert math.isnan(meter.tokens_per_s)  # still warming up
    run_step(meter, clock, 1.0, 100)
    clock.now += 30.0  # evaluation between steps, outside any step
    with meter.paused():  # the same, declared: still a no-op
        clock.now += 30.0
    meter.start_step()
    clock.now += 0.5
    with meter.paused():  # evaluation inside a step
        clock.now += 30.0
    clock.now += 0.5
    assert meter.end_step(100) == 1000.0
    run_step(meter, clock, 2.0, 400)

    assert meter.measured_steps == 3
    assert meter.tokens_per_s == pytest.approx(600 / 4.0)
    assert meter.step_ms == pytest.approx(4000 / 3)
    assert meter.elapsed_s == pytest.approx(9 + 5 + 1 + 1 + 2)


def test_throughput_window_and_resume_state() -> None:
    clock = FakeClock()
    meter = ThroughputMeter(warmup_steps=0, clock=clock)
    run_step(meter, clock, 1.0, 100)
    run_step(meter, clock, 3.0, 100)
    assert meter.window() == (pytest.approx(50.0), pytest.approx(2000.0))
    run_step(meter, clock, 0.5, 100)
    assert meter.window() == (pytest.approx(200.0), pytest.approx(500.0))
    assert all(math.isnan(x) for x in meter.window())

    restored = ThroughputMeter(warmup_steps=1, clock=clock)
    restored.load_state_dict(meter.state_dict())
    run_step(restored, clock, 7.0, 100)  # warm-up again in the new process
    run_step(restored, clock, 0.5, 100)
    assert restored.elapsed_s == pytest.approx(4.5 + 7.5)
    assert restored.tokens_per_s == pytest.approx(400 / 5.0)
    assert restored.window() == (pytest.approx(200.0), pytest.approx(500.0))


def test_end_step_needs_start_step() -> None:
    with pytest.raises(RuntimeError):
        ThroughputMeter().end_step(10)


def test_cpu_peak_memory_in_mib() -> None:
    reset_peak_memory("cpu")
    before = peak_memory_mb("cpu")
    assert before > 0
    block = torch.ones(256 * 2**20 // 4)  # 256 MiB, written so that it is resident
    del block
    after = peak_memory_mb("cpu")
    assert after >= before + 200  # MiB, not KiB or bytes
    assert after < before + 1000
    if Path("/proc/self/clear_refs").exists():
        reset_peak_memory("cpu")  # a new window forgets the old peak
        assert peak_memory_mb("cpu") < after - 200


@pytest.mark.parametrize(
    ("name", "flops"),
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA A100 80GB PCIe", 312e12),
        ("NVIDIA L4", 121e12),
        ("NVIDIA L40S", 362e12),
        ("NVIDIA A10", 125e12),
        ("NVIDIA GeForce RTX 4090", 165e12),
        ("NVIDIA A10G", None),  # not "A10": unknown, so measured instead
        ("Some Future GPU", None),
    ],
)
def test_known_gpu_peak_flops(name: str, flops: float | None) -> None:
    assert known_gpu_peak_flops(name) == flops


def test_cpu_peak_flops_are_measured_once_per_dtype_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIMIND_CACHE_DIR", str(tmp_path))
    measured: list[torch.dtype] = []

    def fake_measure(device: torch.device, dtype: torch.dtype, duration_s: float) -> float:
        measured.append(dtype)
        return 1.5e11 if dtype == torch.float32 else 2.5e10

    monkeypatch.setattr(metrics, "measure_matmul_flops", fake_measure)
    monkeypatch.setattr(metrics, "_MEASURED_THIS_PROCESS", {})
    cpu = torch.device("cpu")
    assert measured_matmul_peak(cpu, torch.float32) == 1.5e11
    assert measured_matmul_peak(cpu, torch.float32) == 1.5e11
    assert measured_matmul_peak(cpu, torch.bfloat16) == 2.5e10
    assert measured == [torch.float32, torch.bfloat16]
    cache = json.loads((tmp_path / "peak_flops.json").read_text())
    threads = f"threads={torch.get_num_threads()}"
    assert len(cache) == 2 and all(threads in key for key in cache)


@pytest.mark.parametrize(
    ("native", "fp32", "bf16", "peak"),
    [(True, 1e11, 4e11, 4e11), (True, 2e11, 5e10, 2e11), (False, 1e11, 4e11, 1e11)],
)
def test_the_device_peak_is_the_best_matmul_peak_of_any_native_precision(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    native: bool,
    fp32: float,
    bf16: float,
    peak: float,
) -> None:
    """One peak per device, so that MFU compares across precisions: the best of the fp32 and
    bf16 matmul peaks; a CPU without native bf16 is not timed in bf16 at all."""
    monkeypatch.setenv("MINIMIND_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(metrics, "cpu_has_native_bf16", lambda: native)
    measured = {torch.float32: fp32, torch.bfloat16: bf16}
    timed: list[torch.dtype] = []
    monkeypatch.setattr(
        metrics,
        "measure_matmul_flops",
        lambda device, dtype, s: timed.append(dtype) or measured[dtype],
    )
    monkeypatch.setattr(metrics, "_MEASURED_THIS_PROCESS", {})
    assert device_peak_flops("cpu") == peak
    assert timed == ([torch.float32, torch.bfloat16] if native else [torch.float32])


def test_a_busy_measurement_never_lowers_the_cached_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIMIND_CACHE_DIR", str(tmp_path))
    for measured, expected in ((1.0e11, 1.0e11), (2.0e10, 1.0e11), (1.6e11, 1.6e11)):
        monkeypatch.setattr(metrics, "_MEASURED_THIS_PROCESS", {})  # a new process
        monkeypatch.setattr(metrics, "measure_matmul_flops", lambda *args, m=measured: m)
        assert measured_matmul_peak(torch.device("cpu"), torch.float32) == expected


def test_matmul_measurement_is_plausible() -> None:
    flops = metrics.measure_matmul_flops(torch.device("cpu"), torch.float32, duration_s=0.0)
    assert 1e8 < flops < 1e14  # any CPU from a phone to a big server


def test_mfu() -> None:
    # 10k tokens/s on a 1M-FLOP-per-token model is 1e10 FLOP/s; of a 1e11 peak that is 10%.
    assert mfu(10_000, 1e6, 1e11) == pytest.approx(0.1)
    assert mfu(0.0, 1e6, 1e11) == 0.0


def test_load_cv_matches_numpy() -> None:
    load = torch.rand(3, 8, generator=torch.Generator().manual_seed(0))
    x = load.numpy().astype(np.float64)
    expected = np.mean(np.std(x, axis=-1) / np.mean(x, axis=-1))
    assert load_cv(load) == pytest.approx(expected, rel=1e-12)
    assert load_cv(torch.full((8,), 0.125)) == 0.0
    assert load_cv(torch.eye(4)) == pytest.approx(math.sqrt(3))  # all tokens on one expert
