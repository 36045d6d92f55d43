"""Model families by `config.json` `model_type`; each maps its checkpoint onto DiffusionTransformer, or
onto its own module (DiffusionGemma, a uniform-noise family); `qwen2` is a causal LM (a verifier), not a dLLM.

The families are declared without torch (their configs in config.py): importing this package registers
them; the torch modules load on first use of their names here or when a family builds its module."""
from __future__ import annotations

from .config import TransformerConfig  # noqa: F401
from .family import Family, get_family, registered_families  # noqa: F401
from . import llada, dream, llada2, sdar, diffusion_gemma, fast_dllm_v2, qwen2  # noqa: F401  (register)

_MODULES = ("DiffusionTransformer", "ForwardOutput", "KVCache")  # from .transformer, which imports torch


def __getattr__(name: str):
    if name in _MODULES:
        from . import transformer

        return getattr(transformer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
