"""One optimizer step of a causal LM on a fixed batch: what the model and mfu suites time.

Both MiniMindLM and HF's LlamaForCausalLM take `(input_ids, labels=input_ids)` and shift the
labels inside, so one step function serves both. Both get the harness's AdamW
(`minimind.training.optim.build_optimizer`: foreach on the CPU, fused on CUDA), so a ratio between them
measures the models, not the optimizers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from minimind.spec.sections import OptimizerConfig
from minimind.training.device import autocast
from minimind.training.optim import build_optimizer


@dataclass
class Trainee:
    """A model with its optimizer and a fixed batch [batch, seq] of token ids on its device."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    batch: torch.Tensor

    @classmethod
    def create(
        cls, model: nn.Module, vocab_size: int, batch: int, seq: int, seed: int = 0
    ) -> Trainee:
        device = next(model.parameters()).device
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, vocab_size, (batch, seq), generator=generator).to(device)
        return cls(model.train(), build_optimizer(model, OptimizerConfig()), ids)

    @property
    def tokens(self) -> int:
        return self.batch.numel()

    def step_fn(
        self,
        bf16: bool = False,
        compiled: Callable[..., Any] | None = None,
        loss_chunk_tokens: int | None = None,
    ) -> Callable[[], None]:
        """A step: forward (through `compiled` if given), loss + aux loss, backward, AdamW.

        `loss_chunk_tokens` (MiniMindLM only): the loss in chunks (`minimind.model.loss`)."""
        forward = compiled if compiled is not None else self.model
        device = self.batch.device
        dtype = torch.bfloat16 if bf16 else None
        chunking = {} if loss_chunk_tokens is None else {"loss_chunk_tokens": loss_chunk_tokens}

        def step() -> None:
            with autocast(device, dtype):
                out = forward(self.batch, labels=self.batch, **chunking)
            loss = out.loss
            aux = getattr(out, "aux_loss", None)  # MiniMindLM's objective is loss + aux_loss
            if aux is not None:
                loss = loss + aux
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

        return step
