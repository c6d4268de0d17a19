"""Minor page faults per cycle of 12 + 48 MiB tensor allocations, with glibc's default malloc
thresholds and with `minimind.training.allocator.keep_freed_memory`.

    python scripts/probes/page_faults.py default
    python scripts/probes/page_faults.py keep
"""

import resource
import sys

import torch

from minimind.training.allocator import keep_freed_memory

CYCLES = 50

if sys.argv[1] == "keep":
    assert keep_freed_memory()
torch.set_num_threads(1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(CYCLES):
    small = torch.empty(12 << 20, dtype=torch.uint8).fill_(1)
    large = torch.empty(48 << 20, dtype=torch.uint8).fill_(1)
    del small, large
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(f"{sys.argv[1]}: {faults / CYCLES:,.0f} minor faults per cycle")
