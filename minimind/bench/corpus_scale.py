"""The data suite at corpus scale: tokenization throughput, peak memory and run start-up of the
sharded pipeline on corpora built here from the embedded text (nothing is downloaded).

A corpus of N MB is `.jsonl` files of about 32 MB, each document a run of tinyshakespeare lines
whose words are shuffled (seeded), so documents repeat no text verbatim at scale. Figures:
- tokenization MB/s of `prepare_data` (its default processes and tokenizer threads) against a
  plain single-process loop of `Tokenizer.encode_batch` (tokenizers' own threads on) over the
  same documents (its peer), side by side on 1 core and on every core, each in a fresh process
  bound to those cores, with one already-trained tokenizer, on the smaller corpus;
- peak RSS of `minimind data prepare` (the sum over its process tree, sampled every 50 ms) at each
  size: it should stay flat as the corpus grows;
- start-up of a run on the prepared corpus in a fresh process: `prepare_data` finding the cache,
  the memmaps opened and a first batch drawn, at each size.
Each is one measurement (minutes at full size), not alternated rounds: read them as indicative.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import yaml

from minimind.bench.context import BenchContext
from minimind.bench.results import Row, Target
from minimind.data import DataConfig, TokenizerConfig
from minimind.data.prepare import usable_cores
from minimind.data.sources import read_text_corpus
from minimind.data.tokenizer import train_bpe

SUITE = "data"
SIZES_MB, QUICK_SIZES_MB = (100, 1000), (1, 3)
FILE_MB = 32
VOCAB, SAMPLE_MB = 4096, 8
SEQ, BATCH = 256, 16
RSS_TARGET_BYTES = 2 << 30

STARTUP_PROBE = """
import json, sys, time
start = time.perf_counter()
from minimind.data import DataConfig, TokenizerConfig, prepare_data
from minimind.data.batches import TrainBatches
imported = time.perf_counter()
data = prepare_data(DataConfig.model_validate_json(sys.argv[1]))
batch, seq = int(sys.argv[2]), int(sys.argv[3])
next(TrainBatches(data.train_tokens, batch, seq, seed=0, doc_starts=data.train_tokens.doc_starts()))
print(json.dumps({"import_s": imported - start, "ready_s": time.perf_counter() - imported}))
"""


def run(ctx: BenchContext) -> list[Row]:
    sizes = QUICK_SIZES_MB if ctx.quick else SIZES_MB
    cores = usable_cores()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="minimind-bench-data-") as tmp:
        root = Path(tmp)
        corpora = {mb: build_corpus(root / f"corpus{mb}", mb * 10**6) for mb in sizes}
        ctx.log(f"[data] built corpora of {', '.join(f'{mb} MB' for mb in sizes)} in {root}")
        sample = _documents(corpora[sizes[0]], min(SAMPLE_MB, sizes[0]) * 10**6)
        tokenizer_path = root / "tokenizer.json"
        train_bpe(sample, VOCAB).save(str(tokenizer_path))

        small = corpora[sizes[0]]
        n_bytes = _text_bytes(small)
        # Fewer cores than the machine's only where a process can be bound to them (Linux).
        pinnable = hasattr(os, "sched_setaffinity")
        for n_cores in dict.fromkeys((1, cores) if pinnable else (cores,)):
            # Each in a fresh process limited to `n_cores` cores (its children too), so that the
            # tokenizer sizes its thread pool and prepare_data its processes to them.
            loop_s, loop_cpu_s = _time_on_cores(n_cores, "loop", small, tokenizer_path, root)
            pipeline_s, pipeline_cpu_s = _time_on_cores(
                n_cores, "pipeline", small, tokenizer_path, root
            )
            loop_rate, pipeline_rate = n_bytes / 1e6 / loop_s, n_bytes / 1e6 / pipeline_s
            rows.append(
                Row(
                    SUITE,
                    f"tokenization {sizes[0]} MB on {n_cores} core{'s' * (n_cores > 1)}: "
                    "prepare_data / plain encode_batch loop",
                    pipeline_rate / loop_rate,
                    "x",
                    Target(">=", 1.0),
                    f"prepare_data {pipeline_rate:.2f} MB/s, loop {loop_rate:.2f} MB/s, 1 run each; "
                    f"CPU s prepare_data {pipeline_cpu_s:.1f}, loop {loop_cpu_s:.1f}",
                )
            )

        for mb, directory in corpora.items():
            cfg = _config(directory, root / f"cache-{mb}", tokenizer_path, None)
            peak, seconds = _peak_rss_of_prepare(cfg, root / f"spec-{mb}.yaml")
            rows.append(
                Row(
                    SUITE,
                    f"peak RSS of `minimind data prepare`, {mb} MB corpus",
                    peak / 2**20,
                    "MiB",
                    Target("<", RSS_TARGET_BYTES / 2**20),
                    f"{_text_bytes(directory) / 1e6 / seconds:.1f} MB/s, {cores} cores",
                )
            )
            startup = _startup(cfg)
            rows.append(
                Row(
                    SUITE,
                    f"run start-up on the prepared {mb} MB corpus",
                    startup["ready_s"],
                    "s",
                    detail=f"imports {startup['import_s']:.2f} s before it",
                )
            )
    return rows


def build_corpus(directory: Path, n_bytes: int, seed: int = 0) -> Path:
    """About `n_bytes` of varied documents in `.jsonl` files of about FILE_MB under
    `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [line for line in read_text_corpus("tinyshakespeare").decode().splitlines() if line]
    rng = np.random.default_rng(seed)
    # A pool of varied lines: each a shakespeare line with its words shuffled.
    pool = []
    for line in rng.choice(lines, size=50_000):
        words = line.split()
        rng.shuffle(words)
        pool.append(" ".join(words))
    written, index = 0, 0
    while written < n_bytes:
        with open(directory / f"part-{index:04d}.jsonl", "w", encoding="utf-8") as f:
            in_file = 0
            while in_file < FILE_MB * 10**6 and written + in_file < n_bytes:
                picks = rng.integers(0, len(pool), size=int(rng.integers(5, 60)))
                text = "\n".join(pool[i] for i in picks)
                f.write(json.dumps({"text": text}) + "\n")
                in_file += len(text.encode())
        written += in_file
        index += 1
    return directory


def _documents(directory: Path, limit: int | None = None):
    """The corpus's documents in file order (up to `limit` UTF-8 bytes)."""
    taken = 0
    for path in sorted(directory.glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                text = json.loads(line)["text"]
                yield text
                taken += len(text.encode())
                if limit is not None and taken >= limit:
                    return


def _text_bytes(directory: Path) -> int:
    return sum(len(text.encode()) for text in _documents(directory))


def _config(directory: Path, cache: Path, tokenizer: Path, procs: int | None) -> DataConfig:
    return DataConfig(
        corpus=str(directory),
        streaming=True,  # the files as they are: no Arrow copy, one piece per file
        tokenizer=TokenizerConfig(path=str(tokenizer)),
        num_proc=procs,
        bos_align=True,
        cache_dir=str(cache),
    )


TOKENIZE_PROBE = """
import sys, time
from pathlib import Path
import datasets, pyarrow.json  # imported by both before the clock: imports are no throughput
from minimind.bench import corpus_scale
from minimind.data import DataConfig, prepare_data
what, corpus, tokenizer, cache = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
start, cpu = time.perf_counter(), time.process_time()
if what == "loop":
    corpus_scale.plain_encode_loop(corpus, tokenizer)
else:
    prepare_data(corpus_scale._config(corpus, Path(cache), tokenizer, None))
print(time.perf_counter() - start, time.process_time() - cpu)
"""


def _time_on_cores(
    n_cores: int, what: str, corpus: Path, tokenizer: Path, root: Path
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process's threads) of the plain loop or of prepare_data
    (its default processes and threads) in a fresh process bound to the first `n_cores` of this
    process's cores. CPU seconds are the work done, which other jobs on the cores do not
    inflate as they do wall seconds (with one process; a pool's workers are not counted)."""
    bind = None
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))[:n_cores]
        bind = lambda: os.sched_setaffinity(0, cpus)  # noqa: E731
    cache = root / f"cache-{what}-{n_cores}"
    result = subprocess.run(
        [sys.executable, "-c", TOKENIZE_PROBE, what, str(corpus), str(tokenizer), str(cache)],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=bind,
    )
    wall_s, cpu_s = map(float, result.stdout.split()[-2:])
    return wall_s, cpu_s


def plain_encode_loop(directory: Path, tokenizer_path: Path) -> None:
    """The peer of the pipeline: the corpus's documents through `Tokenizer.encode_batch` 1024 at
    a time in one process, with the tokenizer's own threads, the ids discarded."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    batch: list[str] = []
    for text in _documents(directory):
        batch.append(text)
        if len(batch) == 1024:
            tokenizer.encode_batch(batch, add_special_tokens=False)
            batch = []
    tokenizer.encode_batch(batch, add_special_tokens=False)


def _tree_rss(pid: int) -> int:
    """Resident bytes of process `pid` and all its descendants, now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        stack.extend(children.get(current, []))
        try:
            status = Path(f"/proc/{current}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


def _peak_rss_of_prepare(cfg: DataConfig, spec_path: Path) -> tuple[int, float]:
    """(peak RSS bytes of the process tree, seconds) of `minimind data prepare` on `cfg`."""
    spec = {"name": "bench", "model": {"vocab_size": VOCAB}, "data": cfg.model_dump(mode="json")}
    spec_path.write_text(yaml.safe_dump(spec))
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "minimind", "data", "prepare", str(spec_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = [0]

    def sample() -> None:
        while process.poll() is None:
            peak[0] = max(peak[0], _tree_rss(process.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = process.communicate()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"minimind data prepare failed: {err.strip()[-2000:]}")
    return peak[0], time.perf_counter() - start


def _startup(cfg: DataConfig) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", STARTUP_PROBE, cfg.model_dump_json(), str(BATCH), str(SEQ)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])
