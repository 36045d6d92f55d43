"""A random-weight checkpoint in a family's real on-disk format, for the loader and memory
benchmarks at full size without a download (`python -m ripple.bench --write-checkpoint DIR`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..errors import RippleError
from ..platform.runtime.models import get_family


def write_random_checkpoint(config: dict[str, Any], out, *, layers: int | None = None, shards: int = 2,
                            dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> int:
    """A checkpoint of `config`'s shapes (first `layers` layers) with random weights, written as
    `shards` safetensors files plus model.safetensors.index.json, under the family's own key names.
    Only LLaDA2 key names are written (the MoE checkpoint the loading test needs). Returns bytes."""
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
