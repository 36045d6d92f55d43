"""SDAR and TraDo (JetAstra/SDAR-*-Chat, SDAR-30B-A3B; Gen-Verse/TraDo-*): Qwen3 block diffusion.

Architecture (the checkpoints' `SDARForCausalLM`, Qwen3's layout): separate q/k/v projections
without biases, per-head RMSNorm on q and k before RoPE, RoPE over the full head dimension,
grouped-query attention, a head dimension that need not be hidden_size / heads, SwiGLU MLPs, an
untied output head; logits are not shifted. `sdar_moe` (SDAR-30B-A3B) replaces every MLP by
Qwen3-MoE routing (models/moe.py: float32 softmax router, top `num_experts_per_tok`, weights
renormalised to sum 1 when `norm_topk_prob`), with the key names of Qwen3-MoE checkpoints.

Decoding (SDAR's `block_diffusion_generate`, ../shared/golden/README.md "sdar-tiny") is block
diffusion with the same rules as LLaDA2, which the family declares and the engine acts on
(`block_causal`, `stops_at_eos`): blocks aligned to absolute position 0, each forward sees the
canvas up to its block's end under block-causal attention, the last block decoded in full, and
decoding ends after a block that leaves a stop id in the response.
"""
from __future__ import annotations

from ....errors import RippleError
from .config import MoEConfig, TransformerConfig, expert_slot
from .family import Family, register_family, renamer, require

_BLOCK = {
    "self_attn.q_proj": "attn.q", "self_attn.k_proj": "attn.k", "self_attn.v_proj": "attn.v",
    "self_attn.o_proj": "attn.o", "self_attn.q_norm": "attn.q_norm", "self_attn.k_norm": "attn.k_norm",
    "input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm",
    "mlp.gate_proj": "gate", "mlp.up_proj": "up", "mlp.down_proj": "down", "mlp.gate": "moe.router",
}
_plain = renamer(r"^model\.layers\.(\d+)\.([\w.]+)\.(weight|bias)$", _BLOCK, {
    "model.embed_tokens.weight": "embed.weight", "model.norm.weight": "norm.weight", "lm_head.weight": "head.weight",
})


def _rename(key: str):
    """Checkpoint key -> our name, or (our stacked name, index) for one expert's slice of it."""
    return expert_slot(key) or _plain(key)


def _moe(cfg: dict) -> MoEConfig:
    """Qwen3-MoE routing in every layer (SDAR-30B-A3B's layout); other layer patterns are refused."""
    if int(cfg.get("decoder_sparse_step", 1)) != 1 or cfg.get("mlp_only_layers"):
        raise RippleError(f"sdar_moe decoder_sparse_step {cfg.get('decoder_sparse_step')!r} / mlp_only_layers "
                          f"{cfg.get('mlp_only_layers')!r} are not supported; supported: 1 and [] (MoE in every layer)")
    moe = MoEConfig(
        n_experts=int(require(cfg, "num_experts")), top_k=int(require(cfg, "num_experts_per_tok")),
        n_group=1, topk_group=1, hidden=int(require(cfg, "moe_intermediate_size")), n_shared=0,
        routed_scaling=1.0, score_function="softmax", norm_topk=bool(cfg.get("norm_topk_prob", False)),
    )
    problems = moe.problems()
    if problems:
        raise RippleError(f"config.json's MoE settings cannot work: {'; '.join(problems)}")
    return moe


def _config(cfg: dict, moe: bool = False) -> TransformerConfig:
    if cfg.get("rope_scaling"):
        raise RippleError(f"SDAR rope_scaling {cfg['rope_scaling']!r} is not supported; supported: null")
    if cfg.get("use_sliding_window"):
        raise RippleError("SDAR use_sliding_window true is not supported; supported: false")
    d = int(require(cfg, "hidden_size"))
    n_heads = int(require(cfg, "num_attention_heads"))
    n_kv = int(cfg.get("num_key_value_heads") or n_heads)
    if n_kv < 1 or n_heads % n_kv:
        raise RippleError(f"config.json: num_attention_heads {n_heads} is not divisible by num_key_value_heads {n_kv}")
    head_dim = int(cfg.get("head_dim") or d // n_heads)
    if head_dim < 2 or head_dim % 2:
        raise RippleError(f"config.json: head_dim {head_dim} cannot carry rotary embeddings; accepted: an even number")
    moe_cfg = _moe(cfg) if moe else None
    bias = bool(cfg.get("attention_bias", False))  # Qwen3: on q, k, v and o alike
    return TransformerConfig(
        vocab_size=int(require(cfg, "vocab_size")), d_model=d, n_layers=int(require(cfg, "num_hidden_layers")),
        n_heads=n_heads, n_kv_heads=n_kv,
        mlp_hidden=int(cfg.get("intermediate_size") or moe_cfg.hidden) if moe_cfg else int(require(cfg, "intermediate_size")),
        rope_theta=float(cfg.get("rope_theta", 10000.0)), norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        qkv_bias=bias, out_bias=bias, rope_full_precision=False, head_size=head_dim, qk_norm=True, moe=moe_cfg, dense_layers=0,
    )


def _family(name: str, moe: bool) -> Family:
    return register_family(Family(
        name=name,
        model_types=(name,),
        shift=0,
        to_config=lambda cfg: _config(cfg, moe),
        rename=_rename,
        tied_head=lambda cfg: bool(cfg.get("tie_word_embeddings", False)),
        max_positions=lambda cfg: int(cfg.get("max_position_embeddings", 32768)),
        block_causal=True,
        stops_at_eos=True,
    ))


SDAR = _family("sdar", moe=False)
SDAR_MOE = _family("sdar_moe", moe=True)
