"""Operator profile of one training step of the tiny preset (batch 8 x 256, fp32, 2 threads):
MiniMindLM against HF's LlamaForCausalLM with the same weights, 5 steps each after 3 warm-ups.

    python scripts/probes/profile_tiny_step.py
"""

import torch
from torch.profiler import ProfilerActivity, profile

from minimind import MiniMindLM, ModelConfig
from minimind.bench.steps import Trainee
from minimind.hf.convert import to_hf_llama

torch.set_num_threads(2)
torch.manual_seed(0)
config = ModelConfig.preset("tiny")
ours = MiniMindLM(config)
models = {"minimind": ours, "HF": to_hf_llama(ours)}
for name, model in models.items():
    step = Trainee.create(model, config.vocab_size, 8, 256).step_fn()
    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            step()
    print(f"===== {name}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
