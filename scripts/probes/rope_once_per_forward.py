"""RoPE's cos/sin computed once per forward (`PositionModule.rotation`) against once per layer,
side by side on the speedrun model (dim 128, 4 layers, batch 4 x 256, bf16 autocast, 2 threads).

    python scripts/probes/rope_once_per_forward.py
"""

import torch

from minimind import MiniMindLM, ModelConfig
from minimind.bench.steps import Trainee
from minimind.training.timing import interleave, median, paired_ratio

torch.set_num_threads(2)
config = ModelConfig.preset(
    "tiny", dim=128, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=8192, max_seq_len=256
)
torch.manual_seed(0)
once, per_layer = MiniMindLM(config), MiniMindLM(config)
per_layer.load_state_dict(once.state_dict())
position = per_layer.position
rotation_once = position.rotation  # the bound method, before it is replaced below


def rotation_per_layer(positions: torch.Tensor):
    """The rotation as it was: every layer's call computes cos and sin again."""

    def rotate(q: torch.Tensor, k: torch.Tensor):
        return rotation_once(positions)(q, k)

    return rotate


position.rotation = rotation_per_layer
steps = {
    name: Trainee.create(model, 8192, 4, 256).step_fn(bf16=True)
    for name, model in (("once", once), ("per layer", per_layer))
}
times = interleave(steps, torch.device("cpu"), 15, 2)
ratio = paired_ratio(times["per layer"], times["once"])
print(f"speed once / per layer: {ratio:.3f}x over 15 rounds")
for name, seconds in times.items():
    print(f"  {name}: {median(seconds) * 1e3:.1f} ms per step (median)")
