"""Multi-process training with torch.distributed: DDP over ranks launched by torchrun.

    torchrun --standalone --nproc_per_node 2 -m minimind run SPEC     # or: minimind run SPEC --nproc 2

`minimind run` joins the process group from torchrun's environment (`RANK`, `WORLD_SIZE`,
`LOCAL_RANK`, `MASTER_ADDR`/`MASTER_PORT`), with NCCL for CUDA tensors and Gloo for CPU tensors.
Every helper here is the identity in a single process, so the trainer and runner call them
unconditionally. `train.parallel` picks DDP (a whole model per rank, gradients all-reduced) or
FSDP2 (`fully_shard` per block: parameters, gradients and optimizer state sharded over ranks).

How the work is split, and why:
- Data: `train.batch_size` is the global batch. Every rank draws the same global batch from the
  seed and keeps its own rows, rank r of W the rows [r·B/W, (r+1)·B/W). The ranks see different
  data, the data order is the one a single process with batch B sees, and the batch stream's
  state (a batch index) is the same on every rank, so one checkpoint resumes them all.
- Gradients: DDP averages them, which equals the gradient of the global batch's mean loss
  (every row has the same number of tokens).
- Metrics: the train losses of a log window are averaged over ranks, validation batches are split
  round-robin over ranks and their sums added up, so every rank holds the global value and takes
  the same branch on a non-finite loss. A time budget is judged on rank 0's clock.
- Side effects: only rank 0 talks to MLflow and writes checkpoints; the other ranks get rank 0's
  answers (run ids, earlier runs) by broadcast (`main_answer`; the tracker's proxy is
  `minimind.tracking.rank_zero`), so all ranks walk the same runs in lockstep and no collective
  waits for a rank that took another branch.
- FSDP: each forward gathers parameters from every rank, so every rank runs every validation
  batch and the sample generations; a checkpoint gathers whole tensors on rank 0 (collective).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule
    from typing_extensions import TypeIs  # typing.TypeIs from Python 3.13

T = TypeVar("T")


# Process group -----------------------------------------------------------------------------


def launched_by_torchrun() -> bool:
    """Whether this process is one rank of a torchrun launch (its env vars are set)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def backend() -> str:
    """NCCL for CUDA tensors where CUDA exists (Gloo still carries CPU tensors), else Gloo."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


@contextlib.contextmanager
def process_group() -> Iterator[None]:
    """Join torchrun's process group for the body (nothing outside torchrun), then leave it."""
    if not launched_by_torchrun() or dist.is_initialized():
        yield
        return
    if torch.cuda.is_available():
        # `torch.device("cuda")` (train.device auto/cuda) then means this rank's own GPU.
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend())
    try:
        yield
    finally:
        dist.destroy_process_group()


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def is_main_process() -> bool:
    return rank() == 0


def main_print(*values: object) -> None:
    """`print` on rank 0 only: every rank walks the same runs, and one line of each is enough."""
    if is_main_process():
        print(*values)


@contextlib.contextmanager
def main_process_first() -> Iterator[None]:
    """Rank 0 runs the body before the others (e.g. to fill a cache they then read). If rank 0's
    body raises, the others still run theirs (and meet the same error) instead of waiting."""
    if not is_main_process():
        dist.barrier()
    try:
        yield
    finally:
        if is_main_process() and world_size() > 1:
            dist.barrier()


# Data and model ----------------------------------------------------------------------------


def local_batch_size(batch_size: int, world: int | None = None) -> int:
    """This rank's share of the global `batch_size`; ValueError when it does not divide."""
    world = world_size() if world is None else world
    if batch_size % world:
        raise ValueError(
            f"the global batch of {batch_size} rows does not split evenly over {world} ranks; "
            f"use a multiple of {world}"
        )
    return batch_size // world


def shard_list(items: Sequence[T]) -> Sequence[T]:
    """Round-robin share of `items` for this rank (all of them in one process)."""
    return items[rank() :: world_size()]


def wrap_model(
    model: torch.nn.Module, device: torch.device, sparse: bool, parallel: str = "ddp"
) -> torch.nn.Module:
    """`model` spread over the process group (itself in one process): `ddp` wraps it in DDP;
    `fsdp` shards each block and the rest in place (FSDP2) and returns it. `sparse`: parameters
    may get no gradient in a step (unrouted MoE experts), which DDP must look for."""
    if world_size() == 1:
        return model
    if parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        layers = model.layers
        assert isinstance(layers, torch.nn.ModuleList)  # MiniMind's blocks
        for block in layers:  # one all-gather per block, freed after its use
            fully_shard(block)
        fully_shard(model)  # embeddings, final norm, head (tied weights stay one parameter)
        return model
    device_ids = [device.index or torch.cuda.current_device()] if device.type == "cuda" else None
    return DistributedDataParallel(
        model, device_ids=device_ids, find_unused_parameters=sparse, **NO_FORWARD_BUFFER_SYNC
    )


# No buffer broadcast in each forward: the model's buffers are derived tables (RoPE), equal on
# every rank, and a broadcast per forward would make evaluation's uneven shares a collective.
# torch 2.13 renamed the option (its old name warns; the new one still syncs once, at
# construction, which equal buffers do not mind); older torch knows only the old name.
NO_FORWARD_BUFFER_SYNC: dict[str, Any] = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)


def gradient_sync(module: Callable[..., Any], sync: bool) -> contextlib.AbstractContextManager:
    """Inside it, backward all-reduces gradients only if `sync` (skip it on all but the last
    micro-batch of a gradient-accumulation step); `module` may be compiled."""
    inner = getattr(module, "_orig_mod", module)
    if sync:
        return contextlib.nullcontext()
    if isinstance(inner, DistributedDataParallel):
        return inner.no_sync()
    if is_sharded(inner):
        return _fsdp_no_sync(inner)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _fsdp_no_sync(module: FSDPModule) -> Iterator[None]:
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def is_sharded(model: object) -> TypeIs[FSDPModule]:
    """Whether `model` is sharded by FSDP2 (its forward is then a collective on every rank)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6: no FSDP2
        return False
    return isinstance(model, FSDPModule)


def plain_tensor(value: torch.Tensor) -> torch.Tensor:
    """A DTensor (e.g. FSDP's gradient norm) as the whole ordinary tensor; others as they are."""
    full = getattr(value, "full_tensor", None)
    return full() if full is not None else value


def full_state_dicts(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model, optimizer) state dicts with whole tensors; for a sharded model a collective that
    gathers them on the CPU of rank 0 (the other ranks get empty dicts)."""
    if not is_sharded(model):
        return model.state_dict(), optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_state_dict(model, optimizer, options=options)


def load_full_state_dicts(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    model_state: dict[str, Any],
    optimizer_state: dict[str, Any],
) -> None:
    """Load what `full_state_dicts` gave (every rank passes the whole state it read)."""
    if not is_sharded(model):
        model.load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    options = StateDictOptions(full_state_dict=True)
    set_state_dict(
        model,
        optimizer,
        model_state_dict=model_state,
        optim_state_dict=optimizer_state,
        options=options,
    )


# Collectives -------------------------------------------------------------------------------


def mean_across_ranks(values: torch.Tensor) -> torch.Tensor:
    """The element-wise mean of `values` over ranks (a new tensor; `values` in one process)."""
    if world_size() == 1:
        return values
    # Sum, then divide: Gloo has no ReduceOp.AVG.
    return sum_across_ranks(values) / world_size()


def sum_across_ranks(values: torch.Tensor) -> torch.Tensor:
    """The element-wise sum of `values` over ranks (a new tensor; `values` in one process)."""
    if world_size() == 1:
        return values
    out = values.clone()
    dist.all_reduce(out)
    return out


def main_value(value: float) -> float:
    """Rank 0's `value` on every rank (e.g. its clock, so all ranks stop at the same step)."""
    if world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.broadcast(tensor, src=0)
    return float(tensor.item())


def main_answer(call: Callable[[], T]) -> T:
    """`call()` run on rank 0 only, its result (picklable) broadcast to every rank. An exception
    on rank 0 is raised there and, as a RuntimeError, on the other ranks."""
    if world_size() == 1:
        return call()
    message: list[Any] = [None]
    error: BaseException | None = None
    if is_main_process():
        try:
            message[0] = ("ok", call())
        except Exception as exc:
            error = exc
            message[0] = ("error", f"{type(exc).__name__}: {exc}")
    dist.broadcast_object_list(message, src=0)
    kind, value = message[0]
    if error is not None:
        raise error
    if kind == "error":
        raise RuntimeError(f"rank 0 failed: {value}")
    return value


# Launching ---------------------------------------------------------------------------------


def torchrun_arguments(nproc: int, minimind_args: Sequence[str]) -> list[str]:
    """torchrun's arguments that run `minimind <minimind_args>` as `nproc` ranks on this host."""
    return ["--standalone", f"--nproc_per_node={nproc}", "-m", "minimind", *minimind_args]


# The launcher's own log lines ("Received 2 death signal, shutting down workers", a rank's
# "failed (exitcode: 2)") repeat what the ranks already said; `launch` hides them unless -v.
_LAUNCHER_LOGGERS = (
    "torch.distributed.run",
    "torch.distributed.launcher",
    "torch.distributed.elastic",
)


def launch(nproc: int, minimind_args: Sequence[str], verbose: bool = False) -> int:
    """Run `minimind <minimind_args>` as `nproc` ranks on this host under torchrun's launcher,
    in this process, and wait for them; the exit code, as one process would give it.

    torchrun starts each rank in a session of its own, so a terminal's Ctrl-C reaches this
    process alone, which passes one SIGINT (or the SIGTERM it got) on to every rank: the ranks
    end their runs KILLED and rank 0 says so in one line, and this process exits with the shell's
    code for the signal (130 for Ctrl-C), where torchrun's command prints a traceback and exits
    1. A rank that failed said why itself: its exit code is returned (128 + N for signal N).
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    from minimind.foundations.exit_codes import exit_code_for_signal

    if not verbose:
        for name in list(logging.root.manager.loggerDict):
            if name.startswith(_LAUNCHER_LOGGERS):
                logging.getLogger(name).setLevel(logging.CRITICAL)
    sys.stdout.flush()
    sys.stderr.flush()
    # torchrun sets 1 itself when it is unset, with a banner saying so; the same, without it.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        run(parse_args(torchrun_arguments(nproc, minimind_args)))
    except SignalException as exc:
        return exit_code_for_signal(exc.sigval)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.exitcode >= 0:
            return failure.exitcode
        print(f"error: rank {rank} was killed by {failure.signal_name()}", file=sys.stderr)
        return exit_code_for_signal(-failure.exitcode)
    return 0
