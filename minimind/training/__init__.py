"""The training layer: one device per run (`device`), the optimizer and schedule (`optim`), the
`Trainer` loop (`trainer`) and when it stops (`budget`), a log window's losses (`metric_window`)
and throughput (`metrics`), validation (`evaluation`), diagnostics (`probes/`), checkpoints
(`checkpoint`), DDP/FSDP plumbing (`distributed`), glibc's allocator (`allocator`), and the
measurements that benchmarks and the study's cost bench share (`timing`, `memory`, `machine`).

Nothing is imported here, so that importing one module does not import torch's whole stack.
"""
