"""position slot: `none`, `learned`, `sinusoidal` and `rope` (aliases `rope-neox`, `rope-gptj`).

Every position module offers the same two operations, so neither the model nor attention asks
which kind it has:
- `embed(x [B, T, D], positions [T]) -> [B, T, D]` adds an absolute signal (identity for rotary);
- `rotate(q [B, H, T, hd], k [B, Hkv, T, hd], positions [T]) -> (q, k)` rotates queries and keys
  (identity for absolute kinds); `rotation(positions)` is the same with the positions bound, a
  `Rotate` taking (q, k).
The model calls `embed` once on the token embeddings, and `rotation(positions)` once per forward:
the `Rotate` that every layer's attention then calls. Rotary positions compute their cos and sin
there, once instead of once per layer (as HF does), which saves the recomputation and the copies
each layer's backward would keep. `positions` are absolute, so with a KV cache they start at the
cache length. Options, checks and counts are declared in `registry/declarations/position.py`.
"""

import functools
from collections.abc import Callable

import torch
from torch import nn

from registry.declarations import position as declared

Rotate = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""(q [B, H, T, hd], k [B, Hkv, T, hd]) -> (q, k), rotated for the positions it was made for."""


class PositionModule(declared.Position, nn.Module):
    """Identity for both operations; subclasses override the one they implement."""

    def __init__(self, *, dim: int, head_dim: int, max_seq_len: int) -> None:
        super().__init__()
        self.dim, self.head_dim, self.max_seq_len = dim, head_dim, max_seq_len

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def rotation(self, positions: torch.Tensor) -> Rotate:
        """`rotate` with `positions` [T] bound, for one forward; kinds with per-position tables
        prepare them here."""
        return functools.partial(self.rotate, positions=positions)


class NoPosition(declared.NoPosition, PositionModule):
    """No position signal (NoPE): the causal mask alone orders the tokens."""


class LearnedPosition(declared.LearnedPosition, PositionModule):
    """A learned table of absolute position embeddings [max_seq_len, dim] (GPT-2)."""

    def __init__(self, *, dim: int, head_dim: int, max_seq_len: int) -> None:
        super().__init__(dim=dim, head_dim=head_dim, max_seq_len=max_seq_len)
        self.table = nn.Embedding(max_seq_len, dim)

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x + self.table(positions)


def sinusoid_table(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Vaswani et al. encodings in float32: PE[p, 2i] = sin(p / base^(2i/dim)), PE[p, 2i+1] = cos(...).

    positions [T] -> [T, dim].
    """
    exponents = torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim
    angles = positions.to(torch.float32)[:, None] / base ** exponents[None, :]
    table = torch.empty(len(positions), dim, dtype=torch.float32, device=positions.device)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles.cos()[:, : dim // 2]
    return table


class SinusoidalPosition(declared.SinusoidalPosition, PositionModule):
    """Fixed sinusoidal absolute encodings added to the embeddings; computed on the fly in float32.

    The sinusoid is scaled by `amplitude`, by default the token embeddings' init std (0.02, the
    scale a learned table starts at). At amplitude 1, Vaswani et al.'s, it swamps token embeddings
    initialised at std 0.02 and a small model sits at the unigram loss for hundreds of steps
    (measured on the quickstart: 6.07 nats at step 80 vs 5.82 at amplitude 0.02).
    """

    def __init__(
        self,
        options: declared.SinusoidalPosition.Options,
        *,
        dim: int,
        head_dim: int,
        max_seq_len: int,
    ) -> None:
        super().__init__(dim=dim, head_dim=head_dim, max_seq_len=max_seq_len)
        self.base = options.base
        self.amplitude = options.amplitude

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        table = sinusoid_table(positions, self.dim, self.base) * self.amplitude
        return x + table.to(x.dtype)


class RotaryPosition(declared.RotaryPosition, PositionModule):
    """Rotary position embedding (RoPE) on the first `rotary_dim` channels of each head.

    The styles share the angles theta_i = theta^(-2i/rotary_dim) and differ only in layout:
    `neox` rotates channel i with i + rotary_dim/2 (GPT-NeoX, Llama); `gptj` rotates adjacent pairs
    2i and 2i+1 (GPT-J). cos and sin are computed in float32 over the head dimension, and the
    rotation runs in float32 before casting back, so bf16 training keeps exact angles.
    """

    def __init__(
        self, options: declared.RotaryPosition.Options, *, dim: int, head_dim: int, max_seq_len: int
    ) -> None:
        super().__init__(dim=dim, head_dim=head_dim, max_seq_len=max_seq_len)
        self.style, self.theta = options.style, options.theta
        self.rotary_dim = declared.rotary_dim(head_dim, options.fraction)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [T, rotary_dim] in float32, laid out for this style."""
        exponents = torch.arange(0, self.rotary_dim, 2, device=positions.device).float()
        inv_freq = 1.0 / (self.theta ** (exponents / self.rotary_dim))
        angles = positions.float()[:, None] * inv_freq[None, :]  # [T, rotary_dim / 2]
        if self.style == "neox":
            angles = torch.cat((angles, angles), dim=-1)
        else:
            angles = angles.repeat_interleave(2, dim=-1)
        return angles.cos(), angles.sin()

    def _rotate_channels(self, x: torch.Tensor) -> torch.Tensor:
        """The 90-degree partner of each channel: (-x2, x1) per rotated pair."""
        if self.style == "neox":
            first, second = x.chunk(2, dim=-1)
            return torch.cat((-second, first), dim=-1)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((-odd, even), dim=-1).flatten(-2)

    def _rotate_one(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.rotary_dim == x.shape[-1]:  # full rotary: no cat, which would copy q and k again
            rotated = x.float()
            return (rotated * cos + self._rotate_channels(rotated) * sin).to(x.dtype)
        rotated, passed = x[..., : self.rotary_dim].float(), x[..., self.rotary_dim :]
        rotated = rotated * cos + self._rotate_channels(rotated) * sin
        return torch.cat((rotated.to(x.dtype), passed), dim=-1)

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rotation(positions)(q, k)

    def rotation(self, positions: torch.Tensor) -> Rotate:
        cos, sin = self.cos_sin(positions)

        def rotate(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self._rotate_one(q, cos, sin), self._rotate_one(k, cos, sin)

        return rotate
