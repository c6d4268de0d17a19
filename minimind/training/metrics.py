"""Measurements of a training run: throughput, peak memory, device peak FLOP/s, MFU, MoE balance.

The rules (docs/architecture.md, 'Measurement rules'): throughput counts optimizer steps only (no warm-up, no evaluation) and
synchronizes the device before reading the clock; peak memory is `max_memory_allocated` on CUDA
and the process's peak RSS on the CPU; MFU divides by one peak per device, whatever the run's
precision: the dense bf16 peak of a known GPU, or elsewhere the best of the fp32 and bf16 matmul
peaks measured on this machine (cached).
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import resource
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import torch

from minimind.foundations.atomic_file import atomic_write_text
from minimind.training.allocator import release_freed_memory
from minimind.training.device import cpu_has_native_bf16, synchronize


class MetricSink(Protocol):
    """Where a run's metrics go (a `minimind.tracking.RunHandle`)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def flush(self, timeout: float | None = None) -> bool: ...


class ThroughputMeter:
    """Tokens per second and milliseconds per optimizer step.

    A step is everything between `start_step()` and `end_step(tokens)`: data, forward, backward
    and the optimizer update. The first `warmup_steps` steps (compilation, allocator and cache
    warm-up) count towards `elapsed_s` but not towards the rates. Time spent inside `paused()`
    (evaluation, checkpointing, sampling) counts towards neither. On CUDA and MPS the device is
    synchronized before every clock read, so queued kernels are charged to the right step.
    """

    def __init__(
        self,
        device: torch.device | str = "cpu",
        warmup_steps: int = 2,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.device = torch.device(device)
        self.warmup_steps = warmup_steps
        self._clock = clock
        self._steps = 0
        self._step_start: float | None = None
        self._paused_s = 0.0
        self.elapsed_s = 0.0
        """Seconds of all completed steps, warm-up included, pauses excluded."""
        self._measured_s = 0.0
        self._measured_tokens = 0
        self._measured_steps = 0
        self._window = (0.0, 0, 0)  # (seconds, tokens, steps) at the previous `window()` call

    def _now(self) -> float:
        synchronize(self.device)
        return self._clock()

    def start_step(self) -> None:
        self._step_start = self._now()
        self._paused_s = 0.0

    def end_step(self, tokens: int) -> float:
        """Close the step that trained on `tokens` tokens; return its duration in ms."""
        if self._step_start is None:
            raise RuntimeError("end_step() without start_step()")
        seconds = self._now() - self._step_start - self._paused_s
        self._step_start = None
        self._steps += 1
        self.elapsed_s += seconds
        if self._steps > self.warmup_steps:
            self._measured_s += seconds
            self._measured_tokens += tokens
            self._measured_steps += 1
        return seconds * 1e3

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Exclude the time of the `with` body from the current step (a no-op between steps)."""
        start = self._now()
        try:
            yield
        finally:
            if self._step_start is not None:
                self._paused_s += self._now() - start

    @property
    def measured_steps(self) -> int:
        return self._measured_steps

    @property
    def tokens_per_s(self) -> float:
        """Mean over all measured steps; NaN before the first one."""
        return _rate(self._measured_tokens, self._measured_s)

    @property
    def step_ms(self) -> float:
        """Mean over all measured steps; NaN before the first one."""
        return _rate(self._measured_s * 1e3, self._measured_steps)

    def window(self) -> tuple[float, float]:
        """(tokens/s, ms/step) over the measured steps since the previous call; NaN if none."""
        seconds, tokens, steps = self._window
        self._window = (self._measured_s, self._measured_tokens, self._measured_steps)
        d_seconds = self._measured_s - seconds
        return (
            _rate(self._measured_tokens - tokens, d_seconds),
            _rate(d_seconds * 1e3, self._measured_steps - steps),
        )

    def state_dict(self) -> dict[str, float | int]:
        """Totals to carry across a resume (warm-up is excluded again in the new process)."""
        return {
            "elapsed_s": self.elapsed_s,
            "measured_s": self._measured_s,
            "measured_tokens": self._measured_tokens,
            "measured_steps": self._measured_steps,
        }

    def load_state_dict(self, state: dict[str, float | int]) -> None:
        self.elapsed_s = float(state["elapsed_s"])
        self._measured_s = float(state["measured_s"])
        self._measured_tokens = int(state["measured_tokens"])
        self._measured_steps = int(state["measured_steps"])
        self._window = (self._measured_s, self._measured_tokens, self._measured_steps)


def _rate(amount: float, per: float) -> float:
    return amount / per if per > 0 else math.nan


_PROC_STATUS = Path("/proc/self/status")
_PROC_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_memory(device: torch.device | str) -> None:
    """Start a new peak-memory window.

    On CUDA this resets the allocator's peak statistics. On Linux CPUs it resets the kernel's
    peak-RSS counter (VmHWM), so that each of several runs in one process reports its own peak,
    after handing the heap's free pages back (they would count as resident otherwise: see
    `minimind.training.allocator`); elsewhere the CPU peak stays the process-lifetime peak.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif device.type != "mps":
        release_freed_memory()
        try:
            _PROC_CLEAR_REFS.write_text("5")
        except OSError:
            pass


def peak_memory_mb(device: torch.device | str) -> float:
    """Peak memory in MiB since `reset_peak_memory`: CUDA `max_memory_allocated`, else peak RSS."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        match = re.search(r"^VmHWM:\s+(\d+) kB", _PROC_STATUS.read_text(), re.MULTILINE)
    except OSError:
        match = None
    if match:
        return int(match.group(1)) / 1024
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    return max_rss / 2**20 if sys.platform == "darwin" else max_rss / 1024


# Dense (no sparsity) bf16 tensor-core peaks from the vendors' datasheets, matched on whole words
# of the device name, first match wins; V100 and T4 have no bf16, so their fp16 peak stands in.
_GPU_PEAK_FLOPS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H100", "PCIE"), 756e12),
    (("H100", "NVL"), 835e12),
    (("H100",), 989e12),  # SXM; its name carries no form factor ("NVIDIA H100 80GB HBM3")
    (("H800",), 989e12),
    (("H200", "NVL"), 835e12),
    (("H200",), 989e12),
    (("GH200",), 989e12),
    (("B200",), 2250e12),
    (("A100",), 312e12),
    (("A800",), 312e12),
    (("L40S",), 362e12),
    (("L40",), 181e12),
    (("L4",), 121e12),
    (("A10",), 125e12),
    (("A6000",), 155e12),
    (("RTX", "4090"), 165e12),
    (("RTX", "3090"), 71e12),
    (("V100",), 125e12),
    (("T4",), 65e12),
    (("MI300X",), 1307e12),
    (("MI250X",), 383e12),
)


def known_gpu_peak_flops(device_name: str) -> float | None:
    """The dense bf16 peak FLOP/s for a GPU name from `torch.cuda.get_device_name`, if known."""
    words = set(re.split(r"[^A-Z0-9]+", device_name.upper()))
    for required, flops in _GPU_PEAK_FLOPS:
        if words.issuperset(required):
            return flops
    return None


def device_peak_flops(device: torch.device | str, benchmark_s: float = 0.5) -> float:
    """The one peak dense FLOP/s that MFU divides by on `device`, whatever a run's precision, so
    that MFU compares across precisions (see 'Measurement rules' in docs/architecture.md).

    Known GPUs: the datasheet bf16 peak. Anything else (the CPU, unknown GPUs, MPS): the fastest
    of the measured matmul peaks in fp32 and bf16 (`measured_matmul_peak`; on a CPU, bf16 only
    where it is native: emulated, it is slower than fp32 and only slow to time). A peak per
    precision would credit an fp32 run with a high MFU for leaving bf16's faster matmuls unused.
    """
    device = torch.device(device)
    if device.type == "cuda":
        known = known_gpu_peak_flops(torch.cuda.get_device_name(device))
        if known is not None:
            return known
    peaks = []
    native_bf16 = device.type != "cpu" or cpu_has_native_bf16()
    for dtype in (torch.float32, torch.bfloat16) if native_bf16 else (torch.float32,):
        try:
            peaks.append(measured_matmul_peak(device, dtype, benchmark_s))
        except (RuntimeError, TypeError):  # a device without matmuls in this dtype (older MPS)
            continue
    return max(peaks)


def measured_matmul_peak(
    device: torch.device, dtype: torch.dtype, benchmark_s: float = 0.5
) -> float:
    """The best FLOP/s of repeated square matmuls in `dtype` on `device` for about `benchmark_s`
    seconds, cached in `$MINIMIND_CACHE_DIR` (default `~/.cache/minimind`) under
    `peak_flops.json`, keyed by device, processor, thread count and dtype.

    A measurement taken while other jobs share the machine comes out low, so each process measures
    once and the cache keeps the highest figure seen: a busy moment never lowers the peak (which
    would inflate MFU).
    """
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = _cpu_model() if device.type == "cpu" else device.type
    key = f"{device.type}|{name}|threads={torch.get_num_threads()}|{dtype}"
    cache_file = _cache_dir() / "peak_flops.json"
    if key not in _MEASURED_THIS_PROCESS:
        _MEASURED_THIS_PROCESS[key] = measure_matmul_flops(device, dtype, benchmark_s)
        # Re-read so that two processes measuring at once lose only their own entry, not others'.
        cache = _read_json(cache_file)
        best = max(float(cache.get(key, 0.0)), _MEASURED_THIS_PROCESS[key])
        if best != cache.get(key):
            merged = {**cache, key: best}
            atomic_write_text(cache_file, json.dumps(merged, indent=1))
    return max(float(_read_json(cache_file).get(key, 0.0)), _MEASURED_THIS_PROCESS[key])


_MEASURED_THIS_PROCESS: dict[str, float] = {}


def measure_matmul_flops(device: torch.device, dtype: torch.dtype, duration_s: float) -> float:
    """Best FLOP/s of an n×n @ n×n matmul repeated for about `duration_s` (at least 3 runs)."""
    n = 1024 if device.type == "cpu" else 4096
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    torch.matmul(a, b)  # warm-up: thread pool, kernel selection
    synchronize(device)
    best = math.inf
    deadline = time.perf_counter() + duration_s
    runs = 0
    while runs < 3 or time.perf_counter() < deadline:
        start = time.perf_counter()
        torch.matmul(a, b)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
        runs += 1
    return 2 * n**3 / best


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cache_dir() -> Path:
    return Path(os.environ.get("MINIMIND_CACHE_DIR") or Path.home() / ".cache" / "minimind")


def _read_json(path: Path) -> dict[str, float]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


class PerfMetrics:
    """The `perf/*` metrics of a log window of a run on `device` (of `world_size` ranks):
    tokens/s and ms per step of the whole run, MFU per device against `device_peak_flops`,
    measured once, on first use."""

    def __init__(self, device: torch.device, flops_per_token: float, world_size: int) -> None:
        self.device = device
        self.flops_per_token = flops_per_token
        self.world_size = world_size
        self._peak_flops: float | None = None

    def of(self, tokens_per_s: float, step_ms: float) -> dict[str, float]:
        """`perf/tokens_per_s`, `perf/step_ms` and `perf/mfu`; none while only warm-up steps
        were timed (NaN rates, `ThroughputMeter.window`)."""
        if math.isnan(tokens_per_s):
            return {}
        if self._peak_flops is None:
            self._peak_flops = device_peak_flops(self.device)
        per_device = tokens_per_s / self.world_size
        return {
            "perf/tokens_per_s": tokens_per_s,
            "perf/step_ms": step_ms,
            "perf/mfu": mfu(per_device, self.flops_per_token, self._peak_flops),
        }


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float) -> float:
    """Model FLOPs utilization: achieved training FLOP/s over the device's peak (a fraction)."""
    return tokens_per_s * flops_per_token / peak_flops


def load_cv(load: torch.Tensor) -> float:
    """Coefficient of variation (population std / mean) of expert load, averaged over layers.

    `load`: [n_experts] or [n_layers, n_experts] (e.g. `MiniMindLM.moe_load()`); 0 is perfect
    balance, sqrt(n_experts - 1) is every token on one expert.
    """
    # float64 on the host: MPS has no float64, and `float()` below reads it back anyway.
    load = load.detach().to("cpu", torch.float64).reshape(-1, load.shape[-1])
    cv = load.std(dim=-1, unbiased=False) / load.mean(dim=-1)
    return float(cv.mean())
