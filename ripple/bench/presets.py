"""The presets: random-weight models for `make bench`, `python -m ripple.bench --preset NAME` and the tests.

A preset is a config dict in its family's own `config.json` key set, turned into a model by
that family's config reader (chosen by `model_type`), exactly as a downloaded checkpoint
would be: so the `llada-8b` preset has LLaDA-8B-Instruct's shapes (GSAI-ML/LLaDA-8B-Instruct
config.json), `llada2-mini` LLaDA2.0-mini's (inclusionAI/LLaDA2.0-mini) and `sdar-8b`
SDAR-8B-Chat's (JetAstra/SDAR training/model/SDAR-8B-Chat/config.json) without a download, and their timings are those of the real models' forwards on this engine.
`fast-dllm-v2-7b` has Efficient-Large-Model/Fast_dLLM_v2_7B's shapes in two of its layers.
`diffusion-gemma-26b` has google/diffusiongemma-26B-A4B-it's shapes in two layers (one of each
attention kind), a uniform-noise family that the mask engine does not decode: its report
(`canvas_report.py`) times the encoder and decoder passes and the peak memory. Weights
are random (normal, std 0.02; norm weights and scales 1), initialised directly on the target device
in the target dtype, so an 8B model never passes through host memory.

Random weights are never confident (the softmax over 126k tokens is nearly flat), so every
decoder commits one token per step on them: decode timings measure the cost per step of
each decoder and cache policy, not its NFE savings.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import RippleError
from ..platform.runtime.engine import Engine
from ..platform.runtime.loading import hollow
from ..platform.runtime.models import get_family

# GSAI-ML/LLaDA-8B-Instruct's config.json (the keys the llada family reads, and its token ids)
LLADA_8B: dict[str, Any] = {
    "model_type": "llada", "block_type": "llama", "d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 32,
    "mlp_hidden_size": 12288, "mlp_ratio": 4, "vocab_size": 126464, "embedding_size": 126464, "rope": True,
    "rope_theta": 500000.0, "rope_full_precision": True, "layer_norm_type": "rms", "rms_norm_eps": 1e-05,
    "include_bias": False, "include_qkv_bias": False, "weight_tying": False, "activation_type": "silu",
    "max_sequence_length": 4096, "mask_token_id": 126336, "eos_token_id": 126081, "pad_token_id": 126081,
}


# inclusionAI/LLaDA2.0-mini's shapes (16 B parameters, 1.4 B active per token); mask id as its
# generate's default, eos as its config
LLADA2_MINI: dict[str, Any] = {
    "model_type": "llada2_moe", "hidden_size": 2048, "num_hidden_layers": 20, "num_attention_heads": 16,
    "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 5120, "moe_intermediate_size": 512,
    "num_experts": 256, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "num_shared_experts": 1,
    "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "score_function": "sigmoid",
    "moe_router_enable_expert_bias": True, "vocab_size": 157184, "rope_theta": 600000, "partial_rotary_factor": 0.5,
    "rms_norm_eps": 1e-06, "use_qk_norm": True, "use_qkv_bias": False, "use_bias": False,
    "tie_word_embeddings": False, "max_position_embeddings": 32768, "mask_token_id": 156895,
    "eos_token_id": 156892, "pad_token_id": 156892,
}


# JetAstra/SDAR-8B-Chat's config.json (Qwen3-8B's shapes as block diffusion, block_size 4; the keys the
# sdar family reads, and its token ids: pad and eos are <|endoftext|>)
SDAR_8B: dict[str, Any] = {
    "model_type": "sdar", "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
    "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "attention_bias": False, "tie_word_embeddings": False,
    "max_position_embeddings": 32768, "block_size": 4, "mask_token_id": 151669, "eos_token_id": 151643,
    "pad_token_id": 151643,
}


# Efficient-Large-Model/Fast_dLLM_v2_7B's config.json (Qwen2.5-7B's shapes as block diffusion, bd_size 32;
# ../shared/golden/README.md "fast-dllm-v2-tiny": the real values, keys the fast_dllm_v2 family reads). The
# config names no mask id (its tokenizer adds |<MASK>| 151665); eos and pad are <|im_end|>
FAST_DLLM_V2_7B: dict[str, Any] = {
    "model_type": "Fast_dLLM_Qwen", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "max_position_embeddings": 32768, "bd_size": 32,
    "use_sliding_window": False, "rope_scaling": None, "bos_token_id": 151643, "eos_token_id": 151645,
    "pad_token_id": 151645, "mask_token_id": 151665,
}


# google/diffusiongemma-26B-A4B-it's config.json (../shared/golden/README.md "diffusion-gemma-tiny": the
# real values; token ids and max_position_embeddings are transformers 5.24's defaults for the class)
DIFFUSION_GEMMA_26B: dict[str, Any] = {
    "model_type": "diffusion_gemma", "architectures": ["DiffusionGemmaForBlockDiffusion"], "canvas_length": 256,
    "eos_token_id": [1, 106], "image_token_id": 258880, "boi_token_id": 255999, "eoi_token_id": 258882,
    "tie_word_embeddings": True, "text_config": {
        "model_type": "diffusion_gemma_text", "hidden_size": 2816, "num_hidden_layers": 30,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5, "num_attention_heads": 16,
        "head_dim": 256, "num_key_value_heads": 8, "global_head_dim": 512, "num_global_key_value_heads": 2,
        "sliding_window": 1024, "num_experts": 128, "top_k_experts": 8, "moe_intermediate_size": 704,
        "intermediate_size": 2112, "vocab_size": 262144, "final_logit_softcapping": 30.0,
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-06, "attention_bias": False,
        "use_bidirectional_attention": "vision", "tie_word_embeddings": True, "max_position_embeddings": 131072,
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                               "rope_theta": 1000000.0}},
        "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2},
}


def with_layers(config: dict[str, Any], layer_types: list[str]) -> dict[str, Any]:
    """A DiffusionGemma config with only these layers (the real shapes otherwise)."""
    text = {**config["text_config"], "layer_types": list(layer_types), "num_hidden_layers": len(layer_types)}
    return {**config, "text_config": text}


@dataclass(frozen=True)
class Preset:
    """A model shape and the decode geometry a preset report measures it at."""

    name: str
    config: dict[str, Any]  # the family's config.json keys
    prompt_tokens: int  # canvas = prompt + gen_length
    gen_length: int
    block_length: int
    doc: str
    # what the preset report decodes: (label, decoder, settings); None: preset_report.DECODERS
    decoders: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] | None = None


def _shrink(**changes: Any) -> dict[str, Any]:
    cfg = {**LLADA_8B, **changes}
    cfg["embedding_size"] = cfg["vocab_size"]
    cfg["mask_token_id"], cfg["eos_token_id"], cfg["pad_token_id"] = cfg["vocab_size"] - 1, 1, 0
    return cfg


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("llada-8b", LLADA_8B, 64, 256, 32, "LLaDA-8B-Instruct's shapes (8.0 B parameters); for one GPU, bfloat16"),
    Preset("cpu", _shrink(d_model=512, n_layers=8, n_heads=8, n_kv_heads=8, mlp_hidden_size=1344, vocab_size=32768),
           192, 64, 32, "make bench's forward model: d_model 512, 8 layers, vocab 32768 (about 50 M parameters)"),
    Preset("llada2-mini", LLADA2_MINI, 64, 256, 32, "LLaDA2.0-mini's shapes (16 B parameters, MoE); for one GPU, "
           "bfloat16"),
    Preset("sdar-8b", SDAR_8B, 64, 256, 4, "SDAR-8B-Chat's shapes (8.2 B parameters, Qwen3 block diffusion) at its "
           "block size 4; for one GPU, bfloat16"),
    # inclusionAI/LLaDA2.1-mini keeps LLaDA2.0-mini's llada2_moe shapes; what changes is the decoding
    # rule (token editing), which this preset's report times in the model card's Quality mode
    Preset("llada2.1-mini", LLADA2_MINI, 64, 256, 32, "LLaDA2.1-mini (LLaDA2.0-mini's shapes, 16 B parameters, "
           "MoE), decoded with and without LLaDA2.1's token editing; for one GPU, bfloat16",
           decoders=(("default", "default", ()), ("confidence", "confidence", ()),
                     ("confidence-quality", "confidence", (("tau", "0.7"), ("edit_tau", "0.5"), ("max_post_steps", "16"))),
                     ("rps", "rps", ()), ("rps-edit", "rps", (("edit_tau", "0.5"), ("max_post_steps", "16"))))),
    Preset("tiny-moe", {**LLADA2_MINI, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "moe_intermediate_size": 32,
                        "num_experts": 16, "n_group": 4, "topk_group": 2, "num_experts_per_tok": 4, "vocab_size": 512,
                        "mask_token_id": 511, "eos_token_id": 1, "pad_token_id": 0},
           32, 64, 32, "LLaDA2 layout in miniature (2 layers, 16 experts): the MoE preset path in seconds on CPU"),
    Preset("tiny", _shrink(d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, mlp_hidden_size=192, vocab_size=512),
           16, 64, 32, "a few hundred thousand parameters: the preset report end to end in seconds on CPU (tests)"),
    Preset("fast-dllm-v2-7b", {**FAST_DLLM_V2_7B, "num_hidden_layers": 2}, 64, 256, 32,
           "Fast_dLLM_v2_7B's shapes (Qwen2.5-7B block diffusion, block 32) in two of its 28 layers (1.56 B "
           "parameters, most of them the 152k-token embedding and head): forward times and memory"),
    Preset("diffusion-gemma-26b", with_layers(DIFFUSION_GEMMA_26B, ["sliding_attention", "full_attention"]),
           64, 256, 256, "DiffusionGemma-26B-A4B's shapes in two layers (one sliding, one full attention; 2.4 B "
           "parameters): encoder and decoder pass times and peak memory against the weights"),
)}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise RippleError(f"unknown preset {name!r}; accepted: {', '.join(PRESETS)}")
    return PRESETS[name]


def random_model(preset: Preset, device: torch.device, dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
    """The preset's module with random weights on `device`: normal(0, 0.02), except norm weights,
    scales and scalars (routers' and layers'), which are 1."""
    cfg = preset.config
    family = get_family(cfg["model_type"])
    with hollow():
        model = family.build(family.to_config(cfg))
    model = model.to(dtype).to_empty(device=device)  # allocated once, in the target dtype
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in [*model.named_parameters(), *model.named_buffers()]:
            if name.endswith(("norm.weight", "scale", "scalar")):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return model.eval().requires_grad_(False)


def random_engine(preset: Preset, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Engine:
    """The preset's model with random weights on `device`, wrapped in an engine. No end-of-sequence
    id, so every response position counts as generated (random weights emit EOS anywhere)."""
    cfg = preset.config
    return Engine(random_model(preset, device, dtype, seed), mask_id=cfg["mask_token_id"], eos_ids=(),
                  pad_id=cfg["pad_token_id"], max_positions=get_family(cfg["model_type"]).max_positions(cfg),
                  device=device)


def parameter_count(engine: Engine) -> int:
    return sum(p.numel() for p in engine.model.parameters())
