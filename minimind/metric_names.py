"""The metric names a training run logs to MLflow (DESIGN.md §5), in one place for the runner's
readers: sweep objectives and the comparison table."""

RUNNER_METRICS: tuple[str, ...] = (
    "train/loss",
    "train/aux_loss",
    "val/loss",
    "val/bpb",
    "opt/lr",
    "opt/grad_norm",
    "perf/tokens_per_s",
    "perf/step_ms",
    "perf/mfu",
    "sys/peak_mem_mb",
    "moe/load_cv",
    "train/tokens",  # tokens seen, so curves can be drawn against tokens
    "time/elapsed_s",  # training wall-clock, so curves can be drawn against time
)
