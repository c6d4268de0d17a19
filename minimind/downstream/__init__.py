"""Downstream evaluations in the training loop (`train.evals`): ranked classification and the
bits per byte of the gold continuation, as OLMo's in-loop evaluations and DCLM's CORE score them.

- `tasks`: the task files (one JSONL format), their subsets and the context-length check;
- `scoring`: log-likelihoods of (context, continuation) requests, split as lm-eval splits them,
  and the metrics (`eval/<task>/acc`, `acc_norm`, `acc_centered`, `bpb`).
"""
