"""Where bf16 autocast starts to pay on this CPU: a training step's tokens/s in bf16 autocast over
fp32, side by side in one process (`minimind.training.timing.interleave`), for models of growing
width (4 layers, vocab 2048) and batches of growing size, at the given thread count. The width
from which bf16 won at every batch is `minimind.training.device.CPU_BF16_MIN_DIM`, from which
`precision: auto` picks bf16 on a CPU with native bf16.

    python scripts/probes/bf16_crossover.py [THREADS] [ROUNDS]
"""

import sys

import torch

from minimind import MiniMindLM, ModelConfig
from minimind.bench.steps import Trainee
from minimind.training.timing import interleave, median, paired_ratio

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
torch.set_num_threads(threads)
VOCAB, LAYERS = 2048, 4
SHAPES = [(2, 64), (4, 64), (4, 128), (8, 128), (16, 128), (16, 256)]  # batch x seq
print(f"{threads} threads, {rounds} rounds, {LAYERS} layers, vocab {VOCAB}")
for dim in (32, 64, 128, 256):
    heads = max(2, dim // 32)
    config = ModelConfig.preset(
        "tiny",
        dim=dim,
        n_layers=LAYERS,
        n_heads=heads,
        n_kv_heads=heads // 2,
        vocab_size=VOCAB,
        max_seq_len=256,
    )
    for batch, seq in SHAPES:
        torch.manual_seed(0)
        trainee = Trainee.create(MiniMindLM(config), VOCAB, batch, seq)
        steps = {"fp32": trainee.step_fn(bf16=False), "bf16": trainee.step_fn(bf16=True)}
        times = interleave(steps, torch.device("cpu"), rounds, 2)
        ratio = paired_ratio(times["fp32"], times["bf16"])
        step_flops = config.flops_per_token(seq) * batch * seq
        print(
            f"dim {dim:3d} batch {batch:2d} x {seq:3d}: {step_flops / 1e9:7.2f} GFLOP/step, "
            f"bf16 / fp32 tokens/s {ratio:.3f}x (fp32 {1e3 * median(times['fp32']):6.1f} ms, "
            f"bf16 {1e3 * median(times['bf16']):6.1f} ms)",
            flush=True,
        )
