"""DiffusionGemma (google/diffusiongemma-26B-A4B-it)'s family: config.json's shapes and checkpoint keys, read
without torch, so a driver validating a spec asks for the family without importing the model
(diffusion_gemma_model.py, named by path and imported when weights load). Uniform noise: the mask engine and its
decoders refuse it in one line."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ....errors import RippleError
from .config import MoEConfig
from .family import Family, register_family

if TYPE_CHECKING:
    import torch

ACTIVATION = "gelu_pytorch_tanh"  # the only hidden_activation of the released checkpoints
LAYER_TYPES = ("sliding_attention", "full_attention")
ROPE_TYPES = ("default", "proportional")


@dataclass(frozen=True)
class LayerShape:
    """One layer's attention: sliding or full, its head width, KV heads and RoPE."""

    sliding: bool
    head_dim: int
    kv_heads: int
    rope_theta: float
    rotated_pairs: int  # pairs of head dims RoPE turns; the others keep frequency 0 (proportional RoPE)
    rope_factor: float = 1.0  # inverse frequencies divided by it

    def inv_freq(self, device: torch.device) -> torch.Tensor:
        """[head_dim / 2] RoPE inverse frequencies (exponents over the full head_dim)."""
        from .transformer import inv_frequencies

        return inv_frequencies(self.head_dim, self.rope_theta, device, self.rotated_pairs) / self.rope_factor


@dataclass(frozen=True)
class DiffusionGemmaConfig:
    vocab_size: int
    d_model: int
    n_heads: int
    mlp_hidden: int  # the dense MLP's and the self-conditioning block's width
    norm_eps: float
    layers: tuple[LayerShape, ...]
    sliding_window: int  # an encoder query at q sees keys q - window < j <= q in sliding layers
    moe: MoEConfig
    softcap: float | None  # final_logit_softcapping: logits = softcap * tanh(logits / softcap)
    canvas_length: int
    attention_bias: bool = False
    image_token_id: int | None = None

    @property
    def n_layers(self) -> int:
        return len(self.layers)


# ---------------------------------------------------------------- the checkpoint's config and keys
def _need(section: dict, key: str, where: str = "text_config") -> Any:
    if section.get(key) is None:
        raise RippleError(f"config.json's {where} lacks {key!r}, needed to build the diffusion_gemma model")
    return section[key]


def _layer_shapes(tc: dict) -> tuple[LayerShape, ...]:
    """Per-layer attention shapes: sliding layers take head_dim / num_key_value_heads, full layers
    global_head_dim / num_global_key_value_heads (the released form; transformers' own per_layer_config
    overrides by layer index are read too)."""
    types = _need(tc, "layer_types")
    n = int(_need(tc, "num_hidden_layers"))
    bad = [t for t in types if t not in LAYER_TYPES] if isinstance(types, list) else [types]
    if bad or len(types) != n:
        raise RippleError(f"config.json: layer_types must list num_hidden_layers {n} entries from "
                          f"{', '.join(LAYER_TYPES)}; got {types!r}")
    n_heads = int(_need(tc, "num_attention_heads"))
    head_dim, kv = int(_need(tc, "head_dim")), int(_need(tc, "num_key_value_heads"))
    global_dim = int(tc.get("global_head_dim") or 512)  # transformers' default when the key is absent
    global_kv = int(tc.get("num_global_key_value_heads") or kv)
    overrides = {int(i): o for i, o in (tc.get("per_layer_config") or {}).items()}
    rope = _need(tc, "rope_parameters")
    shapes = []
    for i, t in enumerate(types):
        sliding = t == "sliding_attention"
        D, H_kv = (head_dim, kv) if sliding else (global_dim, global_kv)
        D = int(overrides.get(i, {}).get("head_dim", D))
        H_kv = int(overrides.get(i, {}).get("num_key_value_heads", H_kv))
        if D < 2 or D % 2 or H_kv < 1 or n_heads % H_kv:
            raise RippleError(f"config.json: layer {i} ({t}) has head_dim {D} and {H_kv} KV heads for "
                              f"{n_heads} query heads; accepted: an even head_dim and KV heads dividing the heads")
        params = rope.get(t) if isinstance(rope, dict) else None
        if not isinstance(params, dict):
            raise RippleError(f"config.json: rope_parameters has no entry for {t!r}")
        kind, share = params.get("rope_type", "default"), float(params.get("partial_rotary_factor", 1.0))
        if kind not in ROPE_TYPES or (kind == "default" and share != 1.0):
            raise RippleError(f"config.json: {t} RoPE {kind!r} with partial_rotary_factor {share} is not "
                              f"supported; supported: default (factor 1.0), proportional")
        shapes.append(LayerShape(sliding, D, H_kv, float(params.get("rope_theta", 10000.0)),
                                 int(share * D // 2), float(params.get("factor", 1.0))))
    return tuple(shapes)


def _config(cfg: dict) -> DiffusionGemmaConfig:
    tc = _need(cfg, "text_config", "top level")
    if tc.get("hidden_activation", ACTIVATION) != ACTIVATION:
        raise RippleError(f"diffusion_gemma hidden_activation {tc['hidden_activation']!r} is not supported; "
                          f"supported: {ACTIVATION}")
    if tc.get("use_bidirectional_attention") not in (None, "vision"):
        raise RippleError(f"diffusion_gemma use_bidirectional_attention {tc['use_bidirectional_attention']!r} is "
                          f"not supported; supported: vision, null (text attends causally in the encoder)")
    if not cfg.get("tie_word_embeddings", True) or not tc.get("tie_word_embeddings", True):
        raise RippleError("diffusion_gemma tie_word_embeddings false is not supported; supported: true "
                          "(the head is the embedding)")
    window = int(_need(tc, "sliding_window"))
    if window < 2:
        raise RippleError(f"config.json: sliding_window {window} is too small; accepted: 2 or more")
    moe = MoEConfig(n_experts=int(_need(tc, "num_experts")), top_k=int(_need(tc, "top_k_experts")), n_group=1,
                    topk_group=1, hidden=int(_need(tc, "moe_intermediate_size")), n_shared=0, routed_scaling=1.0,
                    score_function="softmax", norm_topk=True, activation="gelu_tanh")
    problems = moe.problems()
    if problems:
        raise RippleError(f"config.json's MoE settings cannot work: {'; '.join(problems)}")
    cap = tc.get("final_logit_softcapping")
    image = cfg.get("image_token_id")
    return DiffusionGemmaConfig(
        vocab_size=int(_need(tc, "vocab_size")), d_model=int(_need(tc, "hidden_size")),
        n_heads=int(_need(tc, "num_attention_heads")), mlp_hidden=int(_need(tc, "intermediate_size")),
        norm_eps=float(tc.get("rms_norm_eps", 1e-6)), layers=_layer_shapes(tc), sliding_window=window, moe=moe,
        softcap=None if cap is None else float(cap), canvas_length=int(_need(cfg, "canvas_length", "top level")),
        attention_bias=bool(tc.get("attention_bias", False)), image_token_id=None if image is None else int(image),
    )


_LAYER_KEY = re.compile(r"^model\.(decoder|encoder\.language_model)\.layers\.(\d+)\.(.+)$")
_LAYER_NAMES = {
    "mlp.gate_proj.weight": "mlp.gate.weight", "mlp.up_proj.weight": "mlp.up.weight",
    "mlp.down_proj.weight": "mlp.down.weight", "router.proj.weight": "moe.router.weight",
    "router.scale": "moe.router_scale", "router.per_expert_scale": "moe.per_expert_scale",
    "experts.gate_up_proj": "moe.w_gate_up", "experts.down_proj": "moe.w_down",
}
_SC = "model.decoder.self_conditioning."
_TOP = {"model.decoder.embed_tokens.weight": "embed.weight", "model.decoder.norm.weight": "norm.weight",
        _SC + "pre_norm.weight": "self_conditioning.pre_norm.weight",
        _SC + "gate_proj.weight": "self_conditioning.mlp.gate.weight",
        _SC + "up_proj.weight": "self_conditioning.mlp.up.weight",
        _SC + "down_proj.weight": "self_conditioning.mlp.down.weight"}


def _rename(key: str) -> str | None:
    """Checkpoint key -> our name. The decoder holds the text weights (attention and norms keep their
    names); of the encoder's text layers only the layer_scalar buffers are its own; the vision tower
    and its embedder are not loaded (None), nor anything else outside the decoder."""
    m = _LAYER_KEY.match(key)
    if m is None:
        return _TOP.get(key)
    part, layer, name = m.groups()
    if part != "decoder":
        return f"layers.{layer}.encoder_layer_scalar" if name == "layer_scalar" else None
    return f"layers.{layer}.{_LAYER_NAMES.get(name, name)}"


def refusals(image_token_id) -> dict[int, tuple[str, str]]:
    """Text only: a prompt holding the image placeholder is refused (the vision tower is not loaded)."""
    if image_token_id is None:
        return {}
    return {int(image_token_id): ("image token", "images are not supported (text only)")}


DIFFUSION_GEMMA = register_family(Family(
    name="diffusion_gemma",
    model_types=("diffusion_gemma",),
    shift=0,
    to_config=_config,
    rename=_rename,
    tied_head=lambda cfg: False,  # the module reads its head from the embedding
    max_positions=lambda cfg: int((cfg.get("text_config") or {}).get("max_position_embeddings", 131072)),
    noise="uniform",
    module=f"{__package__}.diffusion_gemma_model:DiffusionGemma",
    prompt_refusals=lambda cfg: refusals(cfg.get("image_token_id")),
    stop_ids="generation_config",  # its generate stops on the generation config's list alone
))
