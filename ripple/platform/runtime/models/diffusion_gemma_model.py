"""DiffusionGemma (google/diffusiongemma-26B-A4B-it): a uniform-noise block-diffusion model (its family, the
config and checkpoint keys: diffusion_gemma.py).

Not a mask model: each canvas starts as random tokens that a renoising decoder denoises for up
to N steps; the emitted canvas then goes through a causal encoder pass that extends a KV cache,
and the next canvas starts after it (../shared/golden/README.md "diffusion-gemma-tiny"; the
reference is transformers 5.24's `DiffusionGemmaForBlockDiffusion`). The family declares
`noise = "uniform"`, so the mask engine and its decoders refuse it in one line.

One set of text weights serves two passes (the reference's encoder ties every text weight to the
decoder's, except each layer's `layer_scalar` buffer, which both checkpoints hold):
- `encode`: causal over token ids at explicit positions; appends to a `GemmaCache` (full layers
  keep every position, sliding layers only the last sliding_window - 1) and returns the final
  hidden state. Positions continue across canvases.
- `decode`: a canvas at positions after the cache attends to every cached key of its layer plus
  the whole canvas, with no mask at all (a sliding layer sees its window - 1 cached positions and
  the canvas, whatever its length); it reads the cache and never writes it. The previous step's
  tempered logits come back in as self-conditioning: their softmax times the embedding, through a
  GeGLU block, added to the canvas embedding before a weightless norm.

Gemma 4's layer: per-head RMSNorm on q and k, a weightless one on v; full-attention layers have no
v_proj and take values from the raw key projection (before k_norm and RoPE); attention scale 1.0;
sliding layers use default RoPE, full layers "proportional" RoPE (only the first
partial_rotary_factor of the pairs turn, frequencies over the full head_dim); a dense GeGLU MLP and
softmax-routed experts side by side, each with its own norms; the layer's output times its
`layer_scalar`. Output: final norm, logits against the tied embedding in float32, softcapped.
Text only: the vision tower is not loaded and a prompt holding the image token is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .diffusion_gemma import DiffusionGemmaConfig, LayerShape, refusals
from .family import refuse_prompt
from .moe import GatedMLP, MoE, MoEConfig
from .transformer import RMSNorm, apply_rope, attend, rms_norm, rope_cos_sin


@dataclass(frozen=True)
class GemmaCache:
    """The encoder's keys (after k_norm and RoPE) and values (after v_norm), per layer
    [B, H_kv, N_l, D_l]: a full layer holds every encoded position (N_l = length), a sliding layer
    the last min(length, sliding_window - 1). Immutable: `encode` returns an extended copy."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    length: int  # positions (slots) encoded so far
    valid: torch.Tensor | None = None  # [B, length] False at padding slots; None: every slot is a token

    def select(self, rows: torch.Tensor) -> "GemmaCache":
        """The cache of batch rows `rows` [G], in that order."""
        return GemmaCache(tuple(k[rows] for k in self.keys), tuple(v[rows] for v in self.values), self.length,
                          None if self.valid is None else self.valid[rows])

    def key_mask(self, n: int) -> torch.Tensor | None:
        """Which of the last n cached slots hold tokens: [B, n] (None: all)."""
        return None if self.valid is None else self.valid[:, self.length - n:]


@dataclass(frozen=True)
class EncoderOutput:
    hidden: torch.Tensor  # [B, T, d] after the final norm (logits: `DiffusionGemma.logits`)
    cache: GemmaCache


class GemmaMoE(MoE):
    """Gemma 4's experts on Ripple's sorted, sync-free MoE path: routed on the residual stream (not
    on the experts' normalised input) through a weightless RMSNorm, a learned per-channel `router_scale`
    and hidden^-0.5; float32 softmax over all experts, top-k renormalised to sum 1, then each weight
    times its expert's `per_expert_scale`. Experts are GeGLU, stored as the checkpoint's [E, 2I, d]."""

    def __init__(self, d_model: int, cfg: MoEConfig, eps: float):
        super().__init__(d_model, cfg)
        E, I = cfg.n_experts, cfg.hidden
        self.eps = eps
        self.w_gate_up = nn.Parameter(torch.empty(E, 2 * I, d_model))  # [E, 2I, d]: gate rows, then up rows
        self.router_scale = nn.Parameter(torch.ones(d_model))  # [d]
        self.per_expert_scale = nn.Parameter(torch.ones(E))  # [E]

    def forward(self, x: torch.Tensor, route: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Experts' input x [B, T, d] routed on `route` [B, T, d] -> [B, T, d]."""
        shape = x.shape
        r = rms_norm(route, self.eps) * self.router_scale * shape[-1] ** -0.5  # [B, T, d]
        idx, w = self.route(r.reshape(-1, shape[-1]))  # [N, k] each
        w = w * self.per_expert_scale[idx]
        return self.mix(x.reshape(-1, shape[-1]), idx, w).view(shape)


class GemmaAttention(nn.Module):
    def __init__(self, cfg: DiffusionGemmaConfig, shape: LayerShape):
        super().__init__()
        self.shape, self.eps = shape, cfg.norm_eps
        H, D, Hkv, bias = cfg.n_heads, shape.head_dim, shape.kv_heads, cfg.attention_bias
        self.q_proj = nn.Linear(cfg.d_model, H * D, bias=bias)
        self.k_proj = nn.Linear(cfg.d_model, Hkv * D, bias=bias)
        self.v_proj = nn.Linear(cfg.d_model, Hkv * D, bias=bias) if shape.sliding else None
        self.o_proj = nn.Linear(H * D, cfg.d_model, bias=bias)
        self.q_norm = RMSNorm(D, cfg.norm_eps)
        self.k_norm = RMSNorm(D, cfg.norm_eps)

    def forward(self, x, cos, sin, past: tuple[torch.Tensor, torch.Tensor] | None, mask):
        """x [B, T, d] -> (output [B, T, d], keys and values [B, H_kv, N + T, D] of the past then x)."""
        B, T, _ = x.shape
        D = self.shape.head_dim
        q = self.q_norm(self.q_proj(x).view(B, T, -1, D)).transpose(1, 2)  # [B, H, T, D]
        raw_k = self.k_proj(x).view(B, T, -1, D)  # [B, T, Hkv, D]
        raw_v = raw_k if self.v_proj is None else self.v_proj(x).view(B, T, -1, D)  # full layers: V from raw K
        k = self.k_norm(raw_k).transpose(1, 2)  # [B, Hkv, T, D]
        v = rms_norm(raw_v, self.eps).transpose(1, 2)  # v_norm has no weight
        q, k = apply_rope(q, cos, sin, q.dtype), apply_rope(k, cos, sin, k.dtype)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)  # [B, Hkv, N + T, D]
        return self.o_proj(attend(q, k, v, mask, scale=1.0)), k, v


class GemmaLayer(nn.Module):
    """Attention, then a dense MLP and the experts side by side on the same residual, each with its own
    pre- and post-norm; their sum is normalised once more, added, and the result scaled by the layer's
    scalar (the encoder's own `encoder_layer_scalar` in `encode`)."""

    def __init__(self, cfg: DiffusionGemmaConfig, shape: LayerShape):
        super().__init__()
        d, eps = cfg.d_model, cfg.norm_eps
        self.input_layernorm = RMSNorm(d, eps)
        self.self_attn = GemmaAttention(cfg, shape)
        self.post_attention_layernorm = RMSNorm(d, eps)
        self.pre_feedforward_layernorm = RMSNorm(d, eps)
        self.mlp = GatedMLP(d, cfg.mlp_hidden, "gelu_tanh")
        self.post_feedforward_layernorm_1 = RMSNorm(d, eps)
        self.pre_feedforward_layernorm_2 = RMSNorm(d, eps)
        self.moe = GemmaMoE(d, cfg.moe, eps)
        self.post_feedforward_layernorm_2 = RMSNorm(d, eps)
        self.post_feedforward_layernorm = RMSNorm(d, eps)
        self.register_buffer("layer_scalar", torch.ones(1))  # [1], the decoder's
        self.register_buffer("encoder_layer_scalar", torch.ones(1))  # [1], the encoder's (equal when converted)

    def forward(self, h, cos, sin, past, mask, encoder: bool):
        """h [B, T, d] -> (h [B, T, d], this layer's keys and values of the past then h)."""
        a, k, v = self.self_attn(self.input_layernorm(h), cos, sin, past, mask)
        h = h + self.post_attention_layernorm(a)
        dense = self.post_feedforward_layernorm_1(self.mlp(self.pre_feedforward_layernorm(h)))
        routed = self.post_feedforward_layernorm_2(self.moe(self.pre_feedforward_layernorm_2(h), route=h))
        h = h + self.post_feedforward_layernorm(dense + routed)
        return h * (self.encoder_layer_scalar if encoder else self.layer_scalar), k, v


class SelfConditioning(nn.Module):
    """The previous step's soft embedding [B, L, d], through a GeGLU block, added to the canvas
    embedding; a weightless norm after (it applies with no self-conditioning too)."""

    def __init__(self, cfg: DiffusionGemmaConfig):
        super().__init__()
        self.eps = cfg.norm_eps
        self.pre_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = GatedMLP(cfg.d_model, cfg.mlp_hidden, "gelu_tanh")

    def forward(self, x: torch.Tensor, soft: torch.Tensor | None) -> torch.Tensor:
        if soft is not None:  # none: a zero soft embedding, whose block output is exactly zero
            x = x + self.mlp(self.pre_norm(soft))
        return rms_norm(x, self.eps)


class DiffusionGemma(nn.Module):
    """The encoder and decoder passes over one set of text weights (module docstring)."""

    def __init__(self, cfg: DiffusionGemmaConfig, family: str = "diffusion_gemma", noise: str = "uniform"):
        super().__init__()
        self.cfg, self.family, self.noise = cfg, family, noise
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)  # also the output head (tied)
        self.layers = nn.ModuleList(GemmaLayer(cfg, shape) for shape in cfg.layers)
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.self_conditioning = SelfConditioning(cfg)

    @property
    def vocab_size(self) -> int:
        return self.cfg.vocab_size

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)  # [B, T, d]
        return x * x.new_tensor(self.cfg.d_model ** 0.5)  # the scale rounded to the model dtype, as the reference

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """cos/sin [B, 1, T, D_l] per layer, computed once per distinct layer shape."""
        tables: dict[LayerShape, tuple[torch.Tensor, torch.Tensor]] = {}
        for shape in self.cfg.layers:
            if shape not in tables:
                tables[shape] = rope_cos_sin(positions, shape.inv_freq(positions.device), dtype)
        return [tables[shape] for shape in self.cfg.layers]

    def _positions(self, start: int, ids: torch.Tensor) -> torch.Tensor:
        B, T = ids.shape
        return torch.arange(start, start + T, device=ids.device)[None].expand(B, T)  # [B, T]

    def _kept(self, shape: LayerShape, n: int) -> int:
        """How many of n encoded slots a layer keeps in the cache."""
        return min(n, self.cfg.sliding_window - 1) if shape.sliding else n

    def _encoder_mask(self, shape: LayerShape, start: int, T: int, n_past: int, valid: torch.Tensor | None,
                      device: torch.device) -> torch.Tensor:
        """[1|B, 1, T, n_past + T] bool (True: visible): causal over slots, within the window in sliding
        layers, padding slots hidden from every query but their own."""
        q = torch.arange(start, start + T, device=device)[:, None]  # [T, 1] query slots
        k = torch.arange(start - n_past, start + T, device=device)[None]  # [1, K] key slots
        vis = k <= q
        if shape.sliding:
            vis = vis & (q - k < self.cfg.sliding_window)
        if valid is None:
            return vis[None, None]
        return ((vis & valid[:, None, start - n_past:]) | (k == q))[:, None]  # [B, 1, T, K]

    @staticmethod
    def _slots(cache: GemmaCache | None, valid: torch.Tensor | None, ids: torch.Tensor) -> torch.Tensor | None:
        """Which slots hold tokens once ids [B, T] are appended: [B, length + T] (None: all of them)."""
        past = None if cache is None else cache.valid
        if past is None and valid is None:
            return None
        B, T = ids.shape

        def every(n: int) -> torch.Tensor:
            return torch.ones(B, n, dtype=torch.bool, device=ids.device)

        return torch.cat((every(cache.length if cache else 0) if past is None else past,
                          every(T) if valid is None else valid), dim=1)

    def encode(self, ids: torch.Tensor, positions: torch.Tensor | None = None, cache: GemmaCache | None = None,
               valid: torch.Tensor | None = None, prompt_columns: int | None = None) -> EncoderOutput:
        """Causal pass over ids [B, T] at positions [B, T] (default: after the cache), appended to `cache`
        (None: the prompt, a new cache). `valid` [B, T]: False at padding (left-padded prompts of a batch).
        `prompt_columns`: how many leading columns of ids are the user's prompt, checked for the image token
        (default: all of them when there is no cache, none after it). A recomputing engine passes the prompt's
        width, since the canvases it re-encodes behind the prompt are the model's own text, whatever their ids."""
        T = ids.shape[1]
        start = cache.length if cache is not None else 0
        if prompt_columns is None:
            prompt_columns = T if cache is None else 0
        if prompt_columns and self.cfg.image_token_id is not None:
            refuse_prompt(self.family, ids[:, :prompt_columns], refusals(self.cfg.image_token_id))
        if positions is None:
            positions = self._positions(start, ids)
        all_valid = self._slots(cache, valid, ids)  # [B, start + T] or None
        h = self._embed(ids)  # [B, T, d]
        keys, values = [], []
        rope = self._rope(positions, h.dtype)
        for i, (layer, shape, (cos, sin)) in enumerate(zip(self.layers, self.cfg.layers, rope)):
            past = None if cache is None else (cache.keys[i], cache.values[i])
            n_past = 0 if past is None else past[0].shape[2]
            mask = self._encoder_mask(shape, start, T, n_past, all_valid, ids.device)
            h, k, v = layer(h, cos, sin, past, mask, encoder=True)  # k, v: [B, Hkv, n_past + T, D]
            keep = self._kept(shape, start + T)
            keys.append(k[:, :, k.shape[2] - keep:])
            values.append(v[:, :, v.shape[2] - keep:])
        return EncoderOutput(self.norm(h), GemmaCache(tuple(keys), tuple(values), start + T, all_valid))

    def decode(self, canvas: torch.Tensor, cache: GemmaCache, positions: torch.Tensor | None = None,
               self_conditioning: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, L, V] (float32, softcapped) for a canvas [B, L] at positions [B, L] (default: right
        after the cache), attending to the cache and the whole canvas; `self_conditioning`: the previous
        step's logits [B, L, V] (the reference feeds the tempered ones), None on a canvas's first step."""
        B, L = canvas.shape
        if positions is None:
            positions = self._positions(cache.length, canvas)
        x = self._embed(canvas)  # [B, L, d]
        soft = None
        if self_conditioning is not None:
            probs = torch.softmax(self_conditioning.float(), dim=-1).to(x.dtype)  # [B, L, V]
            soft = (probs @ self.embed.weight) * x.new_tensor(self.cfg.d_model ** 0.5)  # [B, L, d]
        h = self.self_conditioning(x, soft)
        for i, (layer, (cos, sin)) in enumerate(zip(self.layers, self._rope(positions, h.dtype))):
            past_k, past_v = cache.keys[i], cache.values[i]
            seen = cache.key_mask(past_k.shape[2])  # [B, N_l] or None
            mask = None if seen is None else \
                torch.cat((seen, seen.new_ones(B, L)), dim=1)[:, None, None]  # [B, 1, 1, N_l + L]
            h, _, _ = layer(h, cos, sin, (past_k, past_v), mask, encoder=False)
        return self.logits(self.norm(h))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final hidden states [B, T, d] -> float32 logits [B, T, V] against the tied embedding, softcapped."""
        logits = F.linear(hidden, self.embed.weight).float()  # [B, T, V]
        cap = self.cfg.softcap
        return logits if cap is None else cap * torch.tanh(logits / cap)
