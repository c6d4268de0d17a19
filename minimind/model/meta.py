"""Models built on the meta device, for their parameters' names and shapes (the dry run, FLOP
counts) without allocating or drawing anything.

    with meta_device():
        model = MiniMindLM(cfg)   # parameters on "meta": shapes only
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# The draws a module's own initialisation makes (`nn.Embedding` and `nn.Linear` biases, through
# `nn.init.normal_`). On a meta tensor they draw nothing, yet torch's meta kernel for `normal_`
# imports torch._dynamo the first time it runs: seconds of CPU on every dry run.
_DRAWS: tuple[Callable[..., Any], ...] = (torch.Tensor.normal_, torch.nn.init.normal_)


class _SkipMetaDraws(TorchFunctionMode):
    """Returns a meta tensor from `normal_` as it is (it holds no values to draw into)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in _DRAWS:
            # `nn.init.normal_` passes its tensor by keyword, `Tensor.normal_` as self
            tensor = args[0] if args else kwargs["tensor"]
            if tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


@contextmanager
def meta_device() -> Iterator[None]:
    """`torch.device("meta")`, with draws into meta tensors skipped rather than dispatched."""
    with torch.device("meta"), _SkipMetaDraws():
        yield
