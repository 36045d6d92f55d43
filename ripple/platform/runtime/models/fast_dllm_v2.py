"""Fast-dLLM v2 (NVIDIA's Efficient-Large-Model/Fast_dLLM_v2_7B, `model_type` "Fast_dLLM_Qwen"):
Qwen2.5 turned into a block-diffusion model.

Architecture (the checkpoint's `Fast_dLLM_QwenForCausalLM`, Qwen2's layout under Qwen2's weight
names): q/k/v projections with biases, o_proj and the SwiGLU MLP without, RoPE over the whole head,
grouped-query attention, an untied head. At inference a query at position q sees key j iff
q // B >= j // B (bidirectional inside a block, causal across blocks), and the logits keep their
autoregressive meaning: the row at position i predicts position i + 1.

Decoding (the model's own `generate`, ../shared/golden/README.md "fast-dllm-v2-tiny") is block
diffusion with logits shifted inside each block, which the family declares and the engine acts on:
`block_causal` (blocks aligned to position 0, a forward sees the canvas up to its block's end),
`shift` 1 with `opening_commit` (a block's first position is the argmax of the previous block's
last row: the reference's block-closing forward, which stores the finished block's keys, or its
prefill when the prompt ends on a block boundary; Ripple's block-opening forward recomputes the
finished block and reads that row, so the two are one forward), `prefills_prompt_blocks` (with a
cache, the prompt's whole blocks get a forward of their own first, the reference's prefill, which
yields no token when the prompt ends inside a block), `eos_stops_mid_block` (with
`stop_at_eos`, a row ends as soon as its response holds a stop id with no mask before it, the
reference's stop rule) and `stop_ids` "config" (the stop id is config.json's eos_token_id,
`<|im_end|>`, the reference's `stop_token`; `<|endoftext|>`, which generation_config.json also lists,
is an ordinary token to it). Its sub-blocks are the run setting `sub_block_length`, its threshold rule
is `confidence` with tau = its threshold, and its block cache (`use_block_cache`) is `dual`.
Where the reference is wrong Ripple is not (docs/models.md): a prompt exactly one block long is
read, and batches equal single runs.
"""
from __future__ import annotations

from ....errors import RippleError
from .config import TransformerConfig
from .dream import QWEN2_RENAME, qwen2_max_positions, qwen2_tied_head
from .family import Family, register_family, require


def _config(cfg: dict) -> TransformerConfig:
    if cfg.get("rope_scaling"):
        raise RippleError(f"Fast_dLLM_Qwen rope_scaling {cfg['rope_scaling']!r} is not supported; supported: null")
    if cfg.get("use_sliding_window"):
        raise RippleError("Fast_dLLM_Qwen use_sliding_window true is not supported; supported: false")
    d = int(require(cfg, "hidden_size"))
    n_heads = int(require(cfg, "num_attention_heads"))
    n_kv = int(cfg.get("num_key_value_heads") or n_heads)
    if n_kv < 1 or n_heads % n_kv:
        raise RippleError(f"config.json: num_attention_heads {n_heads} is not divisible by num_key_value_heads {n_kv}")
    if d % n_heads or (d // n_heads) % 2:
        raise RippleError(f"config.json: hidden_size {d} over {n_heads} heads gives no even head dimension; "
                          f"accepted: hidden_size a multiple of 2 * num_attention_heads")
    return TransformerConfig(
        vocab_size=int(require(cfg, "vocab_size")), d_model=d, n_layers=int(require(cfg, "num_hidden_layers")),
        n_heads=n_heads, n_kv_heads=n_kv, mlp_hidden=int(require(cfg, "intermediate_size")),
        rope_theta=float(cfg.get("rope_theta", 10000.0)), norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        qkv_bias=True, rope_full_precision=False,
    )


FAST_DLLM_V2 = register_family(Family(
    name="fast_dllm_v2",
    model_types=("fast_dllm_qwen",),
    shift=1,
    to_config=_config,
    rename=QWEN2_RENAME,
    tied_head=qwen2_tied_head,
    max_positions=qwen2_max_positions,
    opening_commit=True,
    block_causal=True,
    eos_stops_mid_block=True,
    prefills_prompt_blocks=True,
    stop_ids="config",
))
