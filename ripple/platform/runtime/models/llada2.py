"""LLaDA2.x (inclusionAI/LLaDA2.0-mini, LLaDA2.0-flash, LLaDA2.1): MoE block diffusion.

Architecture (inclusionAI's `LLaDA2MoeModelLM`): grouped-query attention with one fused
q/k/v projection, per-head RMSNorm on q and k before RoPE, RoPE on the first
head_dim * partial_rotary_factor dims (frequencies from that width), a dense SwiGLU MLP in
the first `first_k_dense_replace` layers and sigmoid-routed MoE after them (models/moe.py);
logits are not shifted.

Decoding (the reference `generate`, ../shared/golden/README.md "llada2-tiny") is block
diffusion, which the family declares and the engine acts on (`block_causal`, `stops_at_eos`):
blocks are aligned to absolute position 0, so the first decoded block may hold the prompt's
tail; a forward sees the canvas only up to the end of the current block, under block-causal
attention; the last block is decoded in full even past prompt + gen_length; decoding ends
after a block that leaves an end-of-sequence token in the response.
"""
from __future__ import annotations

import re

from ....errors import RippleError
from .config import MoEConfig, TransformerConfig, expert_slot
from .family import Family, register_family, renamer, require

_ATTN = {"attention.query_key_value": "attn.qkv", "attention.dense": "attn.o",
         "attention.query_layernorm": "attn.q_norm", "attention.key_layernorm": "attn.k_norm",
         "input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm",
         "mlp.gate_proj": "gate", "mlp.up_proj": "up", "mlp.down_proj": "down",
         "mlp.gate": "moe.router", "mlp.shared_experts.gate_proj": "moe.shared.gate",
         "mlp.shared_experts.up_proj": "moe.shared.up", "mlp.shared_experts.down_proj": "moe.shared.down"}
_TOP = {"model.word_embeddings.weight": "embed.weight", "model.norm.weight": "norm.weight",
        "lm_head.weight": "head.weight"}
_plain = renamer(r"^model\.layers\.(\d+)\.(.+)\.(weight|bias)$", _ATTN, _TOP)
_EXPERT_BIAS = re.compile(r"^model\.layers\.(\d+)\.mlp\.gate\.expert_bias$")


def _rename(key: str):
    """Checkpoint key -> our name, or (our stacked name, index) for one expert's slice of it."""
    slot = expert_slot(key)
    if slot is not None:
        return slot
    m = _EXPERT_BIAS.match(key)
    if m:
        return f"layers.{m.group(1)}.moe.expert_bias"
    return _plain(key)


def _moe(cfg: dict) -> MoEConfig | None:
    if cfg.get("num_experts") is None:
        return None
    moe = MoEConfig(
        n_experts=int(cfg["num_experts"]), top_k=int(require(cfg, "num_experts_per_tok")),
        n_group=int(cfg.get("n_group") or 1), topk_group=int(cfg.get("topk_group") or 1),
        hidden=int(require(cfg, "moe_intermediate_size")), n_shared=int(cfg.get("num_shared_experts") or 0),
        routed_scaling=float(cfg.get("routed_scaling_factor", 1.0)),
    )
    problems = moe.problems()
    if problems:
        raise RippleError(f"config.json's MoE settings cannot work: {'; '.join(problems)}")
    return moe


def _config(cfg: dict) -> TransformerConfig:
    if cfg.get("score_function", "sigmoid") != "sigmoid":
        raise RippleError(f"LLaDA2 score_function {cfg['score_function']!r} is not supported; supported: sigmoid")
    if cfg.get("rope_scaling"):
        raise RippleError(f"LLaDA2 rope_scaling {cfg['rope_scaling']!r} is not supported; supported: null")
    d = int(require(cfg, "hidden_size"))
    n_heads = int(require(cfg, "num_attention_heads"))
    n_kv = int(cfg.get("num_key_value_heads") or n_heads)
    if n_heads % n_kv:
        raise RippleError(f"config.json: num_attention_heads {n_heads} is not divisible by num_key_value_heads {n_kv}")
    head_dim = int(cfg.get("head_dim") or d // n_heads)
    rotary = int(head_dim * float(cfg.get("partial_rotary_factor", 1.0)))
    if rotary < 2 or rotary % 2 or rotary > head_dim:
        raise RippleError(f"config.json: partial_rotary_factor gives {rotary} rotary dims of a {head_dim}-dim head; "
                          f"accepted: an even number from 2 to {head_dim}")
    moe = _moe(cfg)
    dense = int(cfg.get("first_k_dense_replace", 0)) if moe else int(require(cfg, "num_hidden_layers"))
    return TransformerConfig(
        vocab_size=int(require(cfg, "vocab_size")), d_model=d, n_layers=int(require(cfg, "num_hidden_layers")),
        n_heads=n_heads, n_kv_heads=n_kv, mlp_hidden=int(require(cfg, "intermediate_size")),
        rope_theta=float(cfg.get("rope_theta", 10000.0)), norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        qkv_bias=bool(cfg.get("use_qkv_bias", False)), rope_full_precision=False, head_size=head_dim,
        rotary_dims=rotary, fused_qkv=True, qk_norm=bool(cfg.get("use_qk_norm", False)),
        out_bias=bool(cfg.get("use_bias", False)), moe=moe, dense_layers=dense,
    )


LLADA2 = register_family(Family(
    name="llada2_moe",
    model_types=("llada2_moe",),
    shift=0,
    to_config=_config,
    rename=_rename,
    tied_head=lambda cfg: bool(cfg.get("tie_word_embeddings", False)),
    max_positions=lambda cfg: int(cfg.get("max_position_embeddings", 32768)),
    block_causal=True,
    stops_at_eos=True,
))


_INVERSE_ATTN = {v: k for k, v in _ATTN.items()}
_INVERSE_TOP = {v: k for k, v in _TOP.items()}
_LAYER = re.compile(r"^layers\.(\d+)\.(.+)\.(weight|bias)$")


def checkpoint_tensors(state: dict) -> dict:
    """Our state dict -> tensors under LLaDA2's checkpoint keys (inverse of `_rename`): stacked
    experts split back into one gate/up/down weight per expert, the expert bias as the gate's buffer."""
    out = {}
    for ours, t in state.items():
        if ours in _INVERSE_TOP:
            out[_INVERSE_TOP[ours]] = t
            continue
        m = re.match(r"^layers\.(\d+)\.moe\.(w_gate_up|w_down|expert_bias)$", ours)
        if m:
            layer, kind = m.groups()
            pre = f"model.layers.{layer}.mlp."
            if kind == "expert_bias":
                out[pre + "gate.expert_bias"] = t
            for e in range(t.shape[0] if kind != "expert_bias" else 0):
                if kind == "w_down":
                    out[f"{pre}experts.{e}.down_proj.weight"] = t[e]
                else:  # [E, 2, I, d]: gate rows, then up rows
                    out[f"{pre}experts.{e}.gate_proj.weight"] = t[e, 0]
                    out[f"{pre}experts.{e}.up_proj.weight"] = t[e, 1]
            continue
        m = _LAYER.match(ours)
        if not m:
            raise KeyError(ours)
        layer, name, kind = m.groups()
        out[f"model.layers.{layer}.{_INVERSE_ATTN[name]}.{kind}"] = t
    return out


def checkpoint_config(cfg: TransformerConfig, *, mask_id: int, eos_id: int, pad_id: int, max_positions: int) -> dict:
    """A config.json in LLaDA2's own key set (inclusionAI/LLaDA2.0-mini's keys), so a checkpoint we
    write loads like the released ones."""
    moe = cfg.moe
    return {
        "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe", "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "intermediate_size": cfg.mlp_hidden,
        "moe_intermediate_size": moe.hidden, "num_experts": moe.n_experts, "num_experts_per_tok": moe.top_k,
        "n_group": moe.n_group, "topk_group": moe.topk_group, "num_shared_experts": moe.n_shared,
        "first_k_dense_replace": cfg.dense_layers, "routed_scaling_factor": moe.routed_scaling,
        "score_function": "sigmoid", "moe_router_enable_expert_bias": True, "vocab_size": cfg.vocab_size,
        "rope_theta": cfg.rope_theta, "partial_rotary_factor": cfg.rotary_dim / cfg.head_dim,
        "rms_norm_eps": cfg.norm_eps, "use_qk_norm": cfg.qk_norm, "use_qkv_bias": cfg.qkv_bias,
        "use_bias": cfg.out_bias, "tie_word_embeddings": False, "max_position_embeddings": max_positions,
        "mask_token_id": mask_id, "eos_token_id": eos_id, "pad_token_id": pad_id, "torch_dtype": "float32",
    }
