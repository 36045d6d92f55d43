"""Dream (Dream-v0-Instruct-7B): Qwen2 layout, bidirectional, logits shifted right by one.

Block opening: Fast-dLLM's Dream generation (NVlabs/Fast-dLLM@24cc59e,
dream/model/generation_utils_block.py, `_sample`) commits the block's first position with its
top-1 token at the block-opening forward, whatever its confidence, and runs the decoding rule
on the forwards after it; with a cache it recomputes from the block start. Ripple does the
same for every decoder (`opening_commit`), except that the mask id is never committed (the
reference takes the argmax over the whole vocabulary and can write the mask id back).
"""
from __future__ import annotations

from .config import TransformerConfig
from .family import Family, register_family, renamer, require

QWEN2_BLOCK = {
    "self_attn.q_proj": "attn.q", "self_attn.k_proj": "attn.k", "self_attn.v_proj": "attn.v",
    "self_attn.o_proj": "attn.o", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "mlp_norm",
    "mlp.gate_proj": "gate", "mlp.up_proj": "up", "mlp.down_proj": "down",
}
# Qwen2's checkpoint names (Fast-dLLM v2 keeps them too)
QWEN2_RENAME = renamer(r"^model\.layers\.(\d+)\.([\w.]+)\.(weight|bias)$", QWEN2_BLOCK, {
    "model.embed_tokens.weight": "embed.weight", "model.norm.weight": "norm.weight", "lm_head.weight": "head.weight",
})


def qwen2_config(cfg: dict) -> TransformerConfig:
    """Qwen2's config.json keys (Dream's, and the causal qwen2 family's)."""
    n_heads = require(cfg, "num_attention_heads")
    return TransformerConfig(
        vocab_size=require(cfg, "vocab_size"), d_model=require(cfg, "hidden_size"),
        n_layers=require(cfg, "num_hidden_layers"), n_heads=n_heads,
        n_kv_heads=cfg.get("num_key_value_heads") or n_heads,
        mlp_hidden=require(cfg, "intermediate_size"), rope_theta=float(cfg.get("rope_theta", 10000.0)),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), qkv_bias=True, rope_full_precision=False,
    )


def qwen2_tied_head(cfg: dict) -> bool:
    """Qwen2's config.json: the head shares the embedding only when it says so."""
    return bool(cfg.get("tie_word_embeddings", False))


def qwen2_max_positions(cfg: dict) -> int:
    return int(cfg.get("max_position_embeddings", 32768))


DREAM = register_family(Family(
    name="dream",
    model_types=("dream",),
    shift=1,
    to_config=qwen2_config,
    rename=QWEN2_RENAME,
    tied_head=qwen2_tied_head,
    max_positions=qwen2_max_positions,
    opening_commit=True,
))
