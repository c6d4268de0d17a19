"""The Hugging Face interop layer (needs `transformers`: the optional extra `hf`).

- `convert`: MiniMind models as transformers models, the one home of the name mapping (used by
  `minimind export` and by the benchmark's HF peers);
- `configuration_minimind`, `modeling_minimind`: the model code an export ships for combinations
  without an exact transformers architecture (they import torch and transformers only);
- `export`: `minimind export`'s directory (safetensors, configs, fast tokenizer);
- `source`: the model, weights and tokenizer of a run or checkpoint.

Nothing else in the harness imports this package, so the harness runs without transformers.
"""
