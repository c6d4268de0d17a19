"""Training diagnostics: probes inside the model every `train.probe_every` steps and the spike
and NaN guard on every step, logged under `probe/` (docs/diagnostics.md).

- `stats`: the pure measurements (RMS, attention logits and entropy, output logits, groups);
- `activations`: the forward probes, through hooks on an eager forward of a fixed batch;
- `groups`: the parameters summed by group and layer (gradient RMS, update/parameter ratio);
- `guard`: spike scores and the first non-finite loss or gradient;
- `monitor`: `StepMonitor`, what the trainer calls around each step.
"""

from minimind.training.probes.monitor import PREFIX, StepMonitor

__all__ = ["PREFIX", "StepMonitor"]
