"""Qwen2 (Qwen2ForCausalLM, e.g. Qwen2.5-0.5B): the causal LM that APD uses as its verifier.

The same layout as Dream (ripple/platform/runtime/models/dream.py: q/k/v biases, untied head unless
config.json ties it, RMSNorm, rotate-half RoPE) under causal attention, with the prediction for
position i + 1 read at row i. It is not a diffusion family: no mask id, no decoder runs it, and the
loader builds it only through `load_causal` (ripple/platform/runtime/causal.py).
"""
from __future__ import annotations

import re

from ....errors import RippleError
from .config import TransformerConfig
from .dream import QWEN2_BLOCK, QWEN2_RENAME, qwen2_config, qwen2_max_positions, qwen2_tied_head
from .family import Family, register_family


def _config(cfg: dict) -> TransformerConfig:
    """Dream's reading of the Qwen2 keys; the long-context variants Ripple does not implement are refused."""
    if cfg.get("use_sliding_window"):
        raise RippleError("qwen2: use_sliding_window true is not supported; supported: full attention only")
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if scaling and (scaling.get("rope_type") or scaling.get("type")) not in (None, "default"):
        raise RippleError(f"qwen2: rope_scaling {scaling!r} is not supported; supported: none (default RoPE)")
    if cfg.get("hidden_act", "silu") != "silu":
        raise RippleError(f"qwen2: hidden_act {cfg.get('hidden_act')!r} is not supported; supported: silu")
    rope = cfg.get("rope_parameters") or {}  # transformers >= 5 writes rope_theta there
    if "rope_theta" not in cfg and "rope_theta" in rope:
        cfg = {**cfg, "rope_theta": rope["rope_theta"]}
    return qwen2_config(cfg)


QWEN2 = register_family(Family(
    name="qwen2",
    model_types=("qwen2",),
    shift=0,
    to_config=_config,
    rename=QWEN2_RENAME,
    tied_head=qwen2_tied_head,
    max_positions=qwen2_max_positions,
    causal=True,
))

_INVERSE_BLOCK = {v: k for k, v in QWEN2_BLOCK.items()}
_INVERSE_TOP = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
                "head.weight": "lm_head.weight"}


def checkpoint_key(ours: str) -> str:
    """Our parameter name -> Qwen2's checkpoint key (inverse of `QWEN2_RENAME`)."""
    if ours in _INVERSE_TOP:
        return _INVERSE_TOP[ours]
    m = re.match(r"^layers\.(\d+)\.(.+)\.(weight|bias)$", ours)
    if not m:
        raise KeyError(ours)
    layer, name, kind = m.groups()
    return f"model.layers.{layer}.{_INVERSE_BLOCK[name]}.{kind}"


def checkpoint_config(cfg: TransformerConfig, *, bos_id: int | None, eos_id: int, pad_id: int,
                      max_positions: int) -> dict:
    """A config.json in transformers' Qwen2 key set, so the checkpoint loads in Qwen2ForCausalLM too."""
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model, "intermediate_size": cfg.mlp_hidden, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "hidden_act": "silu",
        "max_position_embeddings": max_positions, "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta,
        "rope_scaling": None, "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
        "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id, "torch_dtype": "float32",
    }
