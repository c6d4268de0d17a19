"""The model layer: `ModelConfig` (`config`), `MiniMindLM` (`lm`), each parameter's initial draw
(`initialisation`), μP's rules (`mup`), KV caches (`kv_cache`), the LM loss (`loss`) and sampling
(`generation`).

Nothing is imported here: the spec reads `minimind.model.config` without importing torch, which
the other modules need.
"""
