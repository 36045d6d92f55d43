"""Model families by `config.json` `model_type`; each maps its checkpoint onto DiffusionTransformer, or
onto its own module (DiffusionGemma, a uniform-noise family); `qwen2` is a causal LM (a verifier), not a dLLM."""
from __future__ import annotations

from .family import Family, get_family, registered_families  # noqa: F401
from . import llada, dream, llada2, sdar, diffusion_gemma, fast_dllm_v2, qwen2  # noqa: F401  (register)
from .transformer import DiffusionTransformer, ForwardOutput, KVCache, TransformerConfig  # noqa: F401
