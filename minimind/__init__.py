"""minimind-lab: ablation studies on small decoder-only language models.

from minimind import MiniMindLM, ModelConfig, SamplingOptions
model = MiniMindLM(ModelConfig.preset("tiny", norm="layernorm"))
out = model.generate(prompt, 32, SamplingOptions(temperature=0.8, top_k=50))
"""

from minimind.config import ModelConfig
from minimind.generation import SamplingOptions
from minimind.model import KVCache, LMOutput, MiniMindLM

__all__ = ["KVCache", "LMOutput", "MiniMindLM", "ModelConfig", "SamplingOptions"]
