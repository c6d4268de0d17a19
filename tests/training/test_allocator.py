"""glibc keeps freed tensor memory in the heap once `keep_freed_memory` ran, for the next step to
reuse, and a new peak-memory window does not count it."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys

import pytest

from minimind.training.allocator import USER_SETTINGS, keep_freed_memory

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")

# Allocate and touch 48 MiB, then free it, in a fresh process (glibc's `mallinfo2`, 2.33+): where
# the block lived (`hblkhd`: bytes in blocks of their own mmap) and what the heap kept free
# (`fordblks`). Which allocations glibc gives their own mmap, and whether a freed heap block is
# returned, are its thresholds' rules, whatever the heap's layout; the page faults a reuse saves
# depend on that layout (minimind/training/allocator.py), so they are not what is asserted.
PROBE = """
import ctypes, sys, torch
import minimind.training.trainer
from minimind.training.allocator import keep_freed_memory
FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
          "fordblks", "keepcost")
class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
block = torch.empty(48 << 20, dtype=torch.uint8)
block.fill_(1)
during = libc.mallinfo2().hblkhd
del block
print(applied, during, libc.mallinfo2().fordblks)
"""
BLOCK = 48 << 20


def _has_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


def placement(mode: str) -> tuple[str, int, int]:
    """(whether the thresholds were set, bytes in own-mmap blocks while the block lived, free
    bytes the heap kept after it was freed)."""
    env = {k: v for k, v in os.environ.items() if k not in USER_SETTINGS}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, check=True
    )
    applied, during, kept = out.stdout.split()
    return applied, int(during), int(kept)


@pytest.mark.skipif(not _has_mallinfo2(), reason="needs glibc 2.33+ (mallinfo2)")
def test_a_freed_block_stays_in_the_heap_for_the_next_step_instead_of_going_back():
    applied, during, kept = placement("default")
    # glibc's default: the block is an mmap of its own, unmapped when freed
    assert applied == "False" and during >= BLOCK and kept < BLOCK
    applied, during, kept = placement("keep")
    # kept: the block comes from the heap, and stays there free once freed, for reuse
    assert applied == "True" and during < BLOCK and kept >= BLOCK


def test_a_users_own_threshold_is_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert keep_freed_memory() is False


def test_a_new_peak_memory_window_does_not_count_memory_kept_from_before():
    """After `keep_freed_memory`, a freed block stays resident until `reset_peak_memory` hands it
    back, so the runs of one process each report their own peak."""
    probe = """
import torch
from minimind.training.allocator import keep_freed_memory
from minimind.training.metrics import peak_memory_mb, reset_peak_memory
assert keep_freed_memory()
reset_peak_memory("cpu")
before = peak_memory_mb("cpu")
block = torch.ones(256 * 2**20 // 4)
del block
reset_peak_memory("cpu")
print(before, peak_memory_mb("cpu"))
"""
    env = {k: v for k, v in os.environ.items() if k not in USER_SETTINGS}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    before, after = map(float, out.stdout.split())
    # Against the process's own size before the block (torch's build sets it: a CUDA build is
    # hundreds of MiB larger), not a fixed figure: the 256 MiB block must not be counted.
    assert after < before + 128
