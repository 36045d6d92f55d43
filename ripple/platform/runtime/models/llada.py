"""LLaDA (LLaDA-8B-Instruct, LLaDA-1.5): OLMo-style "llama" blocks, bidirectional."""
from __future__ import annotations

import re

from ....errors import RippleError
from .config import TransformerConfig
from .family import Family, register_family, renamer, require

_BLOCK = {
    "q_proj": "attn.q", "k_proj": "attn.k", "v_proj": "attn.v", "attn_out": "attn.o",
    "attn_norm": "attn_norm", "ff_norm": "mlp_norm",
    "ff_proj": "gate", "up_proj": "up", "ff_out": "down",
}
_TOP = {"transformer.wte.weight": "embed.weight", "transformer.ln_f.weight": "norm.weight",
        "transformer.ff_out.weight": "head.weight"}
_rename = renamer(r"^(?:model\.)?transformer\.blocks\.(\d+)\.(\w+)\.(weight|bias)$", _BLOCK,
                  {**_TOP, **{"model." + k: v for k, v in _TOP.items()}})


def _config(cfg: dict) -> TransformerConfig:
    if cfg.get("block_type", "llama") != "llama":
        raise RippleError(f"LLaDA block_type {cfg.get('block_type')!r} is not supported; supported: llama")
    if cfg.get("layer_norm_type", "rms") != "rms":
        raise RippleError(f"LLaDA layer_norm_type {cfg.get('layer_norm_type')!r} is not supported; supported: rms")
    if cfg.get("alibi") or not cfg.get("rope", True):
        raise RippleError("LLaDA checkpoints without RoPE (alibi) are not supported")
    n_heads = require(cfg, "n_heads")
    n_kv = 1 if cfg.get("multi_query_attention") else (cfg.get("n_kv_heads") or n_heads)
    d = require(cfg, "d_model")
    hidden = cfg.get("mlp_hidden_size") or cfg.get("mlp_ratio", 4) * d
    return TransformerConfig(
        vocab_size=cfg.get("embedding_size") or require(cfg, "vocab_size"),
        d_model=d, n_layers=require(cfg, "n_layers"), n_heads=n_heads, n_kv_heads=n_kv,
        mlp_hidden=hidden, rope_theta=float(cfg.get("rope_theta", 10000.0)),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
        qkv_bias=bool(cfg.get("include_bias") or cfg.get("include_qkv_bias")),
        rope_full_precision=bool(cfg.get("rope_full_precision", True)),
    )



LLADA = register_family(Family(
    name="llada",
    model_types=("llada",),
    shift=0,
    to_config=_config,
    rename=_rename,
    tied_head=lambda cfg: bool(cfg.get("weight_tying", False)),
    max_positions=lambda cfg: int(cfg.get("max_sequence_length", 4096)),
))


_INVERSE_BLOCK = {v: k for k, v in _BLOCK.items()}
_INVERSE_TOP = {v: k for k, v in _TOP.items()}


def checkpoint_key(ours: str) -> str:
    """Our parameter name -> LLaDA's checkpoint key (inverse of `_rename`)."""
    if ours in _INVERSE_TOP:
        return "model." + _INVERSE_TOP[ours]
    m = re.match(r"^layers\.(\d+)\.(.+)\.(weight|bias)$", ours)
    if not m:
        raise KeyError(ours)
    layer, name, kind = m.groups()
    return f"model.transformer.blocks.{layer}.{_INVERSE_BLOCK[name]}.{kind}"


def checkpoint_config(cfg: TransformerConfig, *, mask_id: int, eos_id: int, pad_id: int, max_positions: int) -> dict:
    """A config.json in LLaDA's own key set, so our checkpoints load like the 8B ones."""
    return {
        "architectures": ["LLaDAModelLM"], "model_type": "llada", "block_type": "llama",
        "d_model": cfg.d_model, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads, "n_layers": cfg.n_layers,
        "mlp_hidden_size": cfg.mlp_hidden, "mlp_ratio": 4, "vocab_size": cfg.vocab_size,
        "embedding_size": cfg.vocab_size, "rope": True, "rope_theta": cfg.rope_theta, "rope_full_precision": True,
        "layer_norm_type": "rms", "rms_norm_eps": cfg.norm_eps, "layer_norm_with_affine": True,
        "activation_type": "silu", "alibi": False, "include_bias": False, "include_qkv_bias": cfg.qkv_bias,
        "weight_tying": False, "scale_logits": False, "input_emb_norm": False,
        "mask_token_id": mask_id, "eos_token_id": eos_id, "pad_token_id": pad_id,
        "max_sequence_length": max_positions, "torch_dtype": "float32", "use_cache": False,
    }
