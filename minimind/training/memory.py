"""Peak memory of one training step of one model, measured fairly while other models are alive.

peak = persistent + transient, where
- persistent: the bytes of the tensors that outlive the step: parameters, buffers, gradients and
  optimizer state (each storage counted once, so tied weights count once);
- transient: the highest level the step's own allocations reach above the level at its start
  (activations, gradients, optimizer temporaries, kernel workspaces).
On CUDA the transient part is `max_memory_allocated` minus `memory_allocated` at the start. On the
CPU it is the peak of the allocator's running total as recorded by the torch profiler
(`profile_memory=True`): every allocation and free through c10's CPU allocator, kernels'
workspaces included. That is the CPU analogue of CUDA's allocated peak. The process's peak RSS is
not: it is one number for the whole process (both sides of a comparison), and freed memory that
glibc keeps for reuse still counts in it. tracemalloc does not see torch's allocations at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch._C._profiler import _ExtraFields_Allocation
from torch.profiler import ProfilerActivity, profile


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors`."""
    storages = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        storages[(storage.device, storage.data_ptr())] = storage.nbytes()
    return sum(storages.values())


def persistent_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Parameters, buffers, gradients and optimizer state of `model`, each storage once."""
    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    grads = [p.grad for p in params if p.grad is not None]
    return tensor_bytes([*params, *model.buffers(), *grads, *state])


def transient_peak_bytes(step: Callable[[], object], device: torch.device) -> int:
    """Highest level of the allocations made by `step()` above the level at its start."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    return _profiled_peak(prof)


def _profiled_peak(prof: profile) -> int:
    """The peak of the CPU allocator's running total during a profile.

    The allocator tallies only blocks allocated while profiling (`total_allocated` of each
    allocation event), so the tally starts at 0 and tensors from before the step are excluded.
    """
    peak = 0
    results = prof.profiler.kineto_results if prof.profiler is not None else None
    assert results is not None, "the profile has ended"
    stack = list(results.experimental_event_tree())
    while stack:
        node = stack.pop()
        fields = node.extra_fields  # an allocation's, for an allocation event
        if isinstance(fields, _ExtraFields_Allocation) and fields.device.type == "cpu":
            peak = max(peak, fields.total_allocated)
        stack.extend(node.children)
    return peak


def step_peak_mib(
    step: Callable[[], object],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> float:
    """Peak MiB of one (warm) training `step` of `model`: persistent + transient."""
    transient = transient_peak_bytes(step, device)
    return (persistent_bytes(model, optimizer) + transient) / 2**20
