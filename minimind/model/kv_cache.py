"""Keys and values of past tokens for incremental decoding: a growing cache and a static one.

A cache holds one `registry.attention.CacheLayer` per layer, which attention hands the new keys
and values [B, Hkv, T, hd] (before any GQA repetition) and from which it gets back every key and
value to attend to, with the mask of what each new query may see; the model asks the cache for
the absolute positions of the tokens of each forward (`positions`).

- `KVCache` grows: each layer's new entries are concatenated after the old ones, so every step's
  shapes differ. Its mask is aligned to the bottom right, because `is_causal=True` aligns
  top-left when there are fewer queries than keys.
- `StaticKVCache` is preallocated for `capacity` tokens: each forward writes its tokens at their
  positions (`index_copy_`), attends over all `capacity` slots, and masks the slots after each
  query's position. Its shapes do not change from token to token and its next position lives on
  the device, so a decode step can be compiled once and replayed as a CUDA graph.

`MiniMindLM.new_cache` and `new_static_cache` make them.
"""

from __future__ import annotations

import torch

from registry.attention import causal_mask


def positions_after(past: int, length: int, max_len: int, device: torch.device) -> torch.Tensor:
    """Absolute positions [length] of tokens that follow `past` others; ValueError beyond
    max_len."""
    if past + length > max_len:
        raise ValueError(f"sequence of {past + length} tokens exceeds max_seq_len {max_len}")
    return torch.arange(past, past + length, device=device)


class KVCache:
    """Per-layer keys and values for incremental decoding that grow with each forward;
    `len(cache)` is the tokens seen."""

    def __init__(self, n_layers: int, max_len: int, device: torch.device) -> None:
        self.max_len, self.device = max_len, device
        self.layers = [KVCacheLayer() for _ in range(n_layers)]

    def __len__(self) -> int:
        return len(self.layers[0])

    def positions(self, length: int) -> torch.Tensor:
        """Absolute positions [length] of the next tokens, after the cached ones."""
        return positions_after(len(self), length, self.max_len, self.device)


class KVCacheLayer:
    """Keys and values [B, Hkv, S, hd] of one layer for the S tokens seen so far.

    They are stored before any GQA repetition, and new entries are concatenated after the old ones.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.size(2)

    def update(
        self, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Add k, v [B, Hkv, T, hd]; return all keys and values [B, Hkv, S + T, hd] and the
        bottom-right causal mask [T, S + T] (None for T = 1 or an empty cache)."""
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat((self.k, k), dim=2), torch.cat((self.v, v), dim=2)
        length, n_keys = k.size(2), self.k.size(2)
        mask = None if length in (1, n_keys) else causal_mask(length, n_keys, k.device)
        return self.k, self.v, mask


class StaticKVCache:
    """Every layer's keys and values in buffers [B, Hkv, capacity, hd], for up to `capacity`
    tokens.

    `positions(T)` starts a forward of T tokens: it returns their absolute positions [T] (from
    the next free slot, a device tensor, so no host sync) and advances that slot. Writing past
    `capacity` is an indexing error; `reset()` starts over in the same buffers (which keep their
    addresses, as a CUDA graph needs). `len()` reads the slot back to the host (a sync).
    """

    def __init__(self, n_layers: int, capacity: int, device: torch.device) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.slots = torch.arange(capacity, device=device)  # [capacity]
        self.next = torch.zeros((), dtype=torch.long, device=device)
        # Read (and, for `next`, advanced in place) by every compiled step: fixed addresses, so
        # that a CUDA graph replays on them instead of copying them in.
        torch._dynamo.mark_static_address(self.slots)
        torch._dynamo.mark_static_address(self.next)
        # Set by `positions` for the current forward of T tokens: their positions [T] and the
        # slots each of them sees [T, capacity].
        self.index = self.slots[:0]
        self.mask = torch.zeros(0, capacity, dtype=torch.bool, device=device)
        self.layers = [StaticKVCacheLayer(self) for _ in range(n_layers)]

    def __len__(self) -> int:
        return int(self.next)

    def positions(self, length: int) -> torch.Tensor:
        """Absolute positions [length] of the tokens of this forward; advances the cache."""
        self.index = self.next + self.slots[:length]
        self.mask = self.slots[None, :] <= self.index[:, None]
        self.next.add_(length)
        return self.index

    def reset(self) -> None:
        self.next.zero_()


class StaticKVCacheLayer:
    """One layer's buffers in a `StaticKVCache`, allocated at the first update with the batch,
    heads, head size and dtype of its keys."""

    def __init__(self, cache: StaticKVCache) -> None:
        self.cache = cache
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def update(
        self, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Write k, v [B, Hkv, T, hd] at the cache's current positions; return the buffers
        [B, Hkv, capacity, hd] and the mask [T, capacity] of the slots each query sees."""
        if self.k is None or self.v is None:
            batch, heads, _, head_dim = k.shape
            shape = (batch, heads, self.cache.capacity, head_dim)
            self.k = k.new_zeros(shape)
            self.v = v.new_zeros(shape)
            # Written in place by every compiled step: fixed addresses, as for `next`.
            torch._dynamo.mark_static_address(self.k)
            torch._dynamo.mark_static_address(self.v)
        self.k.index_copy_(2, self.cache.index, k)
        self.v.index_copy_(2, self.cache.index, v)
        return self.k, self.v, self.cache.mask
