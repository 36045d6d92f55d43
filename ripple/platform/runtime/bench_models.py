"""Random-weight models for `make bench` and `python -m ripple.platform.bench --preset NAME`.

A preset is a config dict in its family's own `config.json` key set, turned into a model by
that family's config reader (chosen by `model_type`), exactly as a downloaded checkpoint
would be: so the `llada-8b` preset has LLaDA-8B-Instruct's shapes (GSAI-ML/LLaDA-8B-Instruct
config.json) and `llada2-mini` LLaDA2.0-mini's (inclusionAI/LLaDA2.0-mini) without a
download, and their timings are those of the real models' forwards on this engine. Weights are random (normal, std 0.02), initialised directly on the target device
in the target dtype, so an 8B model never passes through host memory.

Random weights are never confident (the softmax over 126k tokens is nearly flat), so every
decoder commits one token per step on them: decode timings measure the cost per step of
each decoder and cache policy, not its NFE savings.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...errors import RippleError
from .engine import Engine
from .models import get_family

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


@dataclass(frozen=True)
class Preset:
    """A model shape and the decode geometry a preset report measures it at."""

    name: str
    config: dict[str, Any]  # the family's config.json keys
    prompt_tokens: int  # canvas = prompt + gen_length
    gen_length: int
    block_length: int
    doc: str


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
    Preset("tiny-moe", {**LLADA2_MINI, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "moe_intermediate_size": 32,
                        "num_experts": 16, "n_group": 4, "topk_group": 2, "num_experts_per_tok": 4, "vocab_size": 512,
                        "mask_token_id": 511, "eos_token_id": 1, "pad_token_id": 0},
           32, 64, 32, "LLaDA2 layout in miniature (2 layers, 16 experts): the MoE preset path in seconds on CPU"),
    Preset("tiny", _shrink(d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, mlp_hidden_size=192, vocab_size=512),
           16, 64, 32, "a few hundred thousand parameters: the preset report end to end in seconds on CPU (tests)"),
)}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise RippleError(f"unknown preset {name!r}; accepted: {', '.join(PRESETS)}")
    return PRESETS[name]


def random_engine(preset: Preset, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Engine:
    """The preset's model with random weights on `device`, wrapped in an engine. No end-of-sequence
    id, so every response position counts as generated (random weights emit EOS anywhere)."""
    cfg = preset.config
    family = get_family(cfg["model_type"])
    with torch.device("meta"):
        model = family.build(family.to_config(cfg))
    model = model.to(dtype).to_empty(device=device)  # allocated once, in the target dtype
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    model.eval().requires_grad_(False)
    return Engine(model, mask_id=cfg["mask_token_id"], eos_ids=(), pad_id=cfg["pad_token_id"],
                  max_positions=family.max_positions(cfg), device=device)


def parameter_count(engine: Engine) -> int:
    return sum(p.numel() for p in engine.model.parameters())


def write_random_checkpoint(config: dict[str, Any], out, *, layers: int | None = None, shards: int = 2,
                            dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> int:
    """A checkpoint of `config`'s shapes (first `layers` layers) with random weights, written as
    `shards` safetensors files plus model.safetensors.index.json, under the family's own key names.
    Only LLaDA2 key names are written (the MoE checkpoint the loading test needs). Returns bytes."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    cfg = dict(config, **({"num_hidden_layers": layers} if layers else {}))
    if cfg["model_type"] != "llada2_moe":
        raise RippleError(f"random checkpoints are written for llada2_moe only, not {cfg['model_type']!r}")
    family = get_family("llada2_moe")
    tc = family.to_config(cfg)
    d, hd, E, I = tc.d_model, tc.head_dim, tc.moe.n_experts, tc.moe.hidden
    shapes: dict[str, tuple[int, ...]] = {"model.word_embeddings.weight": (tc.vocab_size, d)}
    for i in range(tc.n_layers):
        pre = f"model.layers.{i}."
        shapes.update({pre + "input_layernorm.weight": (d,), pre + "post_attention_layernorm.weight": (d,),
                       pre + "attention.query_key_value.weight": ((tc.n_heads + 2 * tc.n_kv_heads) * hd, d),
                       pre + "attention.query_layernorm.weight": (hd,), pre + "attention.key_layernorm.weight": (hd,),
                       pre + "attention.dense.weight": (d, tc.n_heads * hd)})
        if i < tc.dense_layers:
            shapes.update({pre + "mlp.gate_proj.weight": (tc.mlp_hidden, d), pre + "mlp.up_proj.weight": (tc.mlp_hidden, d),
                           pre + "mlp.down_proj.weight": (d, tc.mlp_hidden)})
            continue
        shapes.update({pre + "mlp.gate.weight": (E, d), pre + "mlp.gate.expert_bias": (E,)})
        for e in range(E):
            shapes.update({f"{pre}mlp.experts.{e}.gate_proj.weight": (I, d), f"{pre}mlp.experts.{e}.up_proj.weight": (I, d),
                           f"{pre}mlp.experts.{e}.down_proj.weight": (d, I)})
        Is = I * tc.moe.n_shared
        shapes.update({pre + "mlp.shared_experts.gate_proj.weight": (Is, d), pre + "mlp.shared_experts.up_proj.weight": (Is, d),
                       pre + "mlp.shared_experts.down_proj.weight": (d, Is)})
    shapes.update({"model.norm.weight": (d,), "lm_head.weight": (tc.vocab_size, d)})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    total = sum(torch.Size(s).numel() for s in shapes.values()) * dtype.itemsize
    gen = torch.Generator().manual_seed(seed)
    weight_map, part, size, index, written = {}, {}, 0, 1, 0
    names = list(shapes)

    def flush():
        nonlocal part, size, index, written
        name = f"model-{index:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(out / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in part})
        written += size
        part, size, index = {}, 0, index + 1

    for key in names:
        shape = shapes[key]
        t = torch.ones(shape) if key.endswith(("norm.weight", "layernorm.weight")) else \
            torch.randn(shape, generator=gen) * (0.05 if key.endswith("expert_bias") else 0.02)
        part[key] = t.to(dtype)
        size += part[key].numel() * dtype.itemsize
        if index < shards and size >= total / shards:
            flush()
    if part:
        flush()
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": written},
                                                                 "weight_map": weight_map}))
    (out / "config.json").write_text(json.dumps({**cfg, "architectures": ["LLaDA2MoeModelLM"],
                                                 "torch_dtype": str(dtype).removeprefix("torch.")}))
    return written
