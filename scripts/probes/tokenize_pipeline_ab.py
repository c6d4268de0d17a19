"""The plain `encode_batch` loop against `prepare_data` of two source trees, interleaved.

    python scripts/probes/tokenize_pipeline_ab.py OLD_TREE NEW_TREE [MB] [ROUNDS]

OLD_TREE and NEW_TREE are checkouts of the repository (e.g. `git archive <commit> | tar -x -C
DIR`). Each round times, on 1 core and then on 2, the loop, OLD_TREE's pipeline and NEW_TREE's,
each in a fresh process bound to those cores, through the data bench's own probe
(`minimind.bench.corpus_scale`), on an MB-megabyte corpus built as that bench builds its own.
It prints each run's MB/s of wall-clock time and MB per CPU second (the work done, which other
jobs on shared cores inflate less), then each ratio to the loop of the same round.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from minimind.bench import corpus_scale
from minimind.data.tokenizer import train_bpe


def main() -> None:
    old, new = sys.argv[1], sys.argv[2]
    megabytes = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    root = Path(tempfile.mkdtemp(prefix="tokenize-ab-"))
    corpus = corpus_scale.build_corpus(root / "corpus", megabytes * 10**6)
    tokenizer = root / "tokenizer.json"
    train_bpe(corpus_scale._documents(corpus, 8 * 10**6), corpus_scale.VOCAB).save(str(tokenizer))
    n_bytes = corpus_scale._text_bytes(corpus)
    sides = {"loop": ("loop", new), "old": ("pipeline", old), "new": ("pipeline", new)}
    rates: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for round_ in range(rounds):
        for cores in (1, 2):
            cpus = sorted(os.sched_getaffinity(0))[:cores]
            for side, (what, tree) in sides.items():
                cache = root / "cache"
                shutil.rmtree(cache, ignore_errors=True)
                result = subprocess.run(
                    [sys.executable, "-c", corpus_scale.TOKENIZE_PROBE, what, str(corpus)]
                    + [str(tokenizer), str(cache)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"},
                    preexec_fn=lambda cpus=cpus: os.sched_setaffinity(0, cpus),
                )
                wall_s, cpu_s = map(float, result.stdout.split()[-2:])
                rate = (n_bytes / 1e6 / wall_s, n_bytes / 1e6 / cpu_s)
                rates.setdefault((cores, side), []).append(rate)
                print(
                    f"round {round_} {cores} core(s) {side}: {rate[0]:.2f} MB/s wall, "
                    f"{rate[1]:.2f} MB per CPU s",
                    flush=True,
                )
    for cores in (1, 2):
        loop = rates[(cores, "loop")]
        for side in ("old", "new"):
            for k, unit in ((0, "wall"), (1, "CPU")):
                ratios = [s[k] / b[k] for s, b in zip(rates[(cores, side)], loop, strict=True)]
                print(
                    f"{cores} core(s) {side}/loop ({unit}): min {min(ratios):.2f} median "
                    f"{statistics.median(ratios):.2f} max {max(ratios):.2f}"
                )
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
