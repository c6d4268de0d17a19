"""The extra time per evaluation of a held-out suite (`data.eval_sets`): the periodic (sampled)
estimate and the exact end-of-run figure of `val/bpb` alone, then of each set of the suite, on
the spec's first variant's untrained model, one thread.

    python scripts/probes/eval_suite_cost.py experiments/text_domains.yaml [-o KEY=VALUE ...]

Prints the median of `ROUNDS` timings of each, the suite's total beside `val/bpb`'s.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from minimind.data import prepare_data
from minimind.data.splits import HeldOut
from minimind.spec import expand, load_spec
from minimind.training.device import resolve_run_device
from minimind.training.trainer import Trainer

ROUNDS = 2


def timed(work) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    overrides = [a for k, a in enumerate(argv[1:], 1) if argv[k - 1] == "-o"]
    spec = expand(load_spec(argv[0], overrides))[0].spec
    data = prepare_data(spec.data)
    model_cfg = spec.model_config_obj()
    trainer = Trainer(model_cfg, spec.train, data, 0, resolve_run_device(spec.train, model_cfg.dim))
    evaluation = trainer.evaluation
    main_set = HeldOut(data.val_tokens, data.val_bytes)
    rows = [("val/bpb", len(data.val_tokens), timed(evaluation.sampled), 0.0)]
    rows[0] = (*rows[0][:3], timed(lambda: evaluation.exact(main_set)))
    for name, (held, batches) in evaluation.suite.items():
        sampled = timed(lambda b=batches, h=held: evaluation.sampled(b, h))
        exact = timed(lambda h=held: evaluation.exact(h))
        rows.append((f"val/{name}/bpb", len(held.tokens), sampled, exact))
    print(f"{'set':28} {'tokens':>10} {'sampled s':>10} {'exact s':>10}")
    for name, tokens, sampled, exact in rows:
        print(f"{name:28} {tokens:>10,} {sampled:>10.3f} {exact:>10.2f}")
    suite_sampled = sum(r[2] for r in rows[1:])
    suite_exact = sum(r[3] for r in rows[1:])
    print(
        f"suite: +{suite_sampled:.3f} s per periodic evaluation ({suite_sampled / rows[0][2]:.1f}x "
        f"val/bpb's), +{suite_exact:.1f} s at the end ({suite_exact / rows[0][3]:.1f}x)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
