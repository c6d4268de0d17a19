"""The trainer's parameters summed by probe group (`stats.GROUPS`) and by layer, with one
matrix product per measurement instead of a Python loop over tensors."""

from __future__ import annotations

import torch
from torch import nn

from minimind.training.probes.stats import GROUPS, parameter_group


class ParameterGroups:
    """Rows: each group present in the model, then `layer<i>` for every layer, each a set of
    the parameters listed by `model.named_parameters()` (the trainer's order)."""

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        named = list(model.named_parameters())
        self.names = [name for name, _ in named]
        self.groups = [parameter_group(name) for name in self.names]
        present = [g for g in GROUPS if any(group == g for group, _ in self.groups)]
        layers = sorted({layer for _, layer in self.groups if layer is not None})
        self.rows = [*present, *(f"layer{i}" for i in layers)]
        member = torch.zeros(len(self.rows), len(named))
        for j, (group, layer) in enumerate(self.groups):
            member[self.rows.index(group), j] = 1.0
            if layer is not None:
                member[self.rows.index(f"layer{layer}"), j] = 1.0
        self.membership = member.to(device)  # [rows, n_params]
        numel = torch.tensor([float(p.numel()) for _, p in named])
        self.numel = (member @ numel).to(device)  # [rows]

    def sums(self, per_tensor: torch.Tensor) -> torch.Tensor:
        """Per-tensor values [n_params] (e.g. squared norms) summed per row: [rows]."""
        return self.membership @ per_tensor.float()

    def rms(self, norms: torch.Tensor) -> torch.Tensor:
        """Per-tensor L2 norms [n_params] -> each row's RMS over its elements [rows]."""
        return (self.sums(norms.pow(2)) / self.numel).sqrt()

    def describe(self, index: int) -> str:
        """Where parameter `index` lives, for a message: 'attention of layer 2 (layers.2...)'."""
        group, layer = self.groups[index]
        where = f"{group} of layer {layer}" if layer is not None else group
        return f"{where} ({self.names[index]})"
