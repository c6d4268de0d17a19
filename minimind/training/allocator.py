"""Keep freed tensor memory inside the process, so a training step does not page-fault it back in.

torch's CPU allocator takes every tensor from glibc's malloc. glibc serves large blocks with their
own mmap and, when such a block is freed, hands it straight back to the kernel; blocks in the heap
beyond the trim threshold are returned too. A training step frees and reallocates the same
16–50 MiB activations every step, so each step page-faults them in again: measured at 14k minor
faults (28 ms of system time) per step of the tiny preset, and 12.7k faults per 60 MiB
alloc/free cycle in isolation. Raising both thresholds keeps the blocks in the heap and reuses
them: about 1k faults per cycle, and 88–100 ms → 74–78 ms per tiny fp32 step.

The cost is that the process's resident memory stays at its peak instead of shrinking between
steps, which a training process reaches again on the next step anyway. Between runs it is handed
back with `release_freed_memory`, so that one run's peak RSS does not include the memory the
previous run in the same process left behind. A user who has set glibc's own
`MALLOC_MMAP_THRESHOLD_` or `MALLOC_TRIM_THRESHOLD_` keeps that choice.

It does not help every process alike: the heap layout glibc starts from depends on the
randomised address-space layout and on what the imports allocated (which Python's hash seed
reorders). In a probe of ten 48 MiB alloc/free cycles after importing `minimind.training.trainer`, the
default faults in all ten cycles (122,924 faults) and the kept setting 3 to 9 of them, by
layout (36,905 to 110,634 faults measured across commits and hash seeds). Why some layouts
still fault the blocks in is not traced; `tests/training/test_allocator.py` checks what holds in
every layout: the block comes from the heap and stays there once freed.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h> option numbers
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 30  # blocks up to 1 GiB come from the reusable heap
TRIM_THRESHOLD = 2 << 30  # free heap memory is returned only beyond 2 GiB
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True if they were set.

    A no-op (False) off glibc, or when the user set either threshold in the environment.
    """
    libc = _glibc()
    if libc is None or any(name in os.environ for name in USER_SETTINGS):
        return False
    return bool(
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the kernel now (glibc's `malloc_trim`; else a no-op)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
