"""The compile cache that runs share: torch's own on-disk caches in one folder under `results/`.

With `train.compile: true` the first run of a shape compiles its graphs and torch stores the
result: AOTAutograd's cache (the forward and backward graphs of a traced graph) and inductor's FX
graph cache (the generated code and the C++ it compiled). A later run of the same shape, serial,
a `--jobs` job or another invocation, finds them there and loads them instead of lowering and
compiling again; dynamo still traces the model in every process (seconds), which no cache
skips.

Torch keys each entry by the graph, its inputs' shapes, strides and dtypes, the compiler's
configuration and the torch version, so a changed model, shape or torch never loads a stale
entry, and the loaded code is the code a cold compile generates: the same numbers. Torch writes
every entry atomically (a file named by pid and thread, renamed into place) and compiles C++
under a file lock, so concurrent jobs share the folder safely.

Where: `results/compile_cache/` under the working directory, or `$MINIMIND_COMPILE_CACHE_DIR`;
deleting the folder clears it. Torch's own switches still apply (`TORCHINDUCTOR_FX_GRAPH_CACHE=0`,
`TORCHINDUCTOR_AUTOGRAD_CACHE=0`, `TORCHINDUCTOR_FORCE_DISABLE_CACHES=1`).

`torch.compiler.save_cache_artifacts` / `load_cache_artifacts` package the same entries as bytes
to carry them to another machine; on one host, or a shared filesystem, the folder itself is what
they would be loaded into.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_COMPILE_CACHE_DIR = Path("results/compile_cache")
COMPILE_CACHE_ENV = "MINIMIND_COMPILE_CACHE_DIR"
_TORCH_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def compile_cache_dir() -> Path:
    """The folder runs share compiled graphs through, absolute (resolved against the working
    directory now, so a later `chdir` does not move it)."""
    return Path(os.environ.get(COMPILE_CACHE_ENV) or DEFAULT_COMPILE_CACHE_DIR).absolute()


def use_compile_cache() -> Path:
    """Point torch's compile caches at `compile_cache_dir()` and return it. Call before the
    first compile of a run: inductor reads the variable at every cache access, and processes
    started afterwards (its compile workers, spawned jobs) inherit it."""
    directory = compile_cache_dir()
    os.environ[_TORCH_CACHE_ENV] = str(directory)
    return directory


def cache_counts() -> dict[str, int]:
    """The process's compiled graphs so far (a forward and a backward graph each): `hits`, loaded
    from inductor's FX graph cache, and `misses`, lowered and compiled (not found, or not
    cacheable), from torch's compile counters."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return {
        "hits": inductor["fxgraph_cache_hit"],
        "misses": inductor["fxgraph_cache_miss"] + inductor["fxgraph_cache_bypass"],
    }
