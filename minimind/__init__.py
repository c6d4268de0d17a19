"""minimind-lab: ablation studies on small decoder-only language models.

from minimind import MiniMindLM, ModelConfig, SamplingOptions
model = MiniMindLM(ModelConfig.preset("tiny", norm="layernorm"))
out = model.generate(prompt, 32, SamplingOptions(temperature=0.8, top_k=50))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minimind.model.config import ModelConfig
    from minimind.model.generation import SamplingOptions
    from minimind.model.kv_cache import KVCache
    from minimind.model.lm import LMOutput, MiniMindLM

# Imported on first use, so that `minimind --help` and the CLI's start-up do not import torch.
_HOMES = {
    "KVCache": "minimind.model.kv_cache",
    "LMOutput": "minimind.model.lm",
    "MiniMindLM": "minimind.model.lm",
    "ModelConfig": "minimind.model.config",
    "SamplingOptions": "minimind.model.generation",
}

__all__ = ["KVCache", "LMOutput", "MiniMindLM", "ModelConfig", "SamplingOptions"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'minimind' has no attribute {name!r}")
