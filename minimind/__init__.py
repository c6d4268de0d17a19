"""minimind-lab: ablation studies on small decoder-only language models.

from minimind import ModelConfig, MiniMindLM
model = MiniMindLM(ModelConfig.preset("tiny", norm="layernorm"))
"""

from minimind.config import ModelConfig
from minimind.model import KVCache, LMOutput, MiniMindLM

__all__ = ["KVCache", "LMOutput", "MiniMindLM", "ModelConfig"]
