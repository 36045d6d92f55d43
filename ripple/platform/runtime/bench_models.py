"""Random-weight models for `make bench` and `python -m ripple.platform.bench --preset NAME`.

A preset is a config dict in LLaDA's own `config.json` key set, turned into a model by the
`llada` family's config reader, exactly as a downloaded checkpoint would be: so the
`llada-8b` preset has LLaDA-8B-Instruct's shapes (GSAI-ML/LLaDA-8B-Instruct config.json)
without a download, and its timings are those of the real model's forward on this
engine. Weights are random (normal, std 0.02), initialised directly on the target device
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
from .models import DiffusionTransformer
from .models.llada import LLADA

# GSAI-ML/LLaDA-8B-Instruct's config.json (the keys the llada family reads, and its token ids)
LLADA_8B: dict[str, Any] = {
    "model_type": "llada", "block_type": "llama", "d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 32,
    "mlp_hidden_size": 12288, "mlp_ratio": 4, "vocab_size": 126464, "embedding_size": 126464, "rope": True,
    "rope_theta": 500000.0, "rope_full_precision": True, "layer_norm_type": "rms", "rms_norm_eps": 1e-05,
    "include_bias": False, "include_qkv_bias": False, "weight_tying": False, "activation_type": "silu",
    "max_sequence_length": 4096, "mask_token_id": 126336, "eos_token_id": 126081, "pad_token_id": 126081,
}


@dataclass(frozen=True)
class Preset:
    """A model shape and the decode geometry a preset report measures it at."""

    name: str
    config: dict[str, Any]  # LLaDA config.json keys
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
    with torch.device("meta"):
        model = DiffusionTransformer(LLADA.to_config(cfg), shift=LLADA.shift, opening_commit=LLADA.opening_commit)
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
                  max_positions=cfg["max_sequence_length"], device=device)


def parameter_count(engine: Engine) -> int:
    return sum(p.numel() for p in engine.model.parameters())
