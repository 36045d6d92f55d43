"""One bidirectional LLaMA-style transformer that every supported family maps onto.

LLaDA (OLMo-derived "llama" blocks), Dream (Qwen2 layout) and LLaDA2 (MoE) compute the
same thing: pre-RMSNorm attention with rotate-half RoPE, a SwiGLU MLP, a final norm and an
output head. Families differ in config keys, weight names, q/k/v biases, whether the
prediction for position i is read at i-1 (``shift``), and LLaDA2's extras, which are config
switches here: a fused q/k/v projection, per-head RMSNorm on q and k before RoPE (qk-norm),
RoPE on the first ``rotary_dim`` dims of a head only (partial rotary), and mixture-of-experts
MLPs after the first ``dense_layers`` layers (ripple/platform/runtime/models/moe.py).

The forward is general enough for every cache policy and the packed lookahead:
``tokens`` are the fresh inputs, the first ``w1 - w0`` of which fill the canvas window
[w0, w1); the rest are extra segments (lookahead variants) appended after the canvas.
Keys are ordered canvas positions 0..N-1 (cached outside the window, fresh inside),
then the extra tokens, so an attention mask column k < N always means canvas position k.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig  # noqa: F401 (re-exported)
from .moe import MoE, MoEConfig


@dataclass
class KVCache:
    """Post-RoPE keys and values of every canvas position, per layer: [B, H_kv, N, D]."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return self.keys[0].shape[2]

    def select(self, rows: torch.Tensor) -> "KVCache":
        return KVCache([k[rows] for k in self.keys], [v[rows] for v in self.values])

    def truncate(self, n: int) -> "KVCache":
        """The first n positions (the canvas, without packed segments appended after it)."""
        return KVCache([k[:, :, :n] for k in self.keys], [v[:, :, :n] for v in self.values])

    def overwrite(self, rows: torch.Tensor, fresh: "KVCache", lo: int, hi: int) -> None:
        """In place: batch rows `rows` of positions [lo, hi) take `fresh`'s (whose batch is those rows)."""
        for mine, new in ((self.keys, fresh.keys), (self.values, fresh.values)):
            for old, f in zip(mine, new):
                old[rows, :, lo:hi] = f[:, :, lo:hi]

    def merge(self, fresh: "KVCache", w0: int, w1: int, n: int) -> "KVCache":
        """Canvas positions [0, n): these keys outside [w0, w1), `fresh`'s first w1 - w0 inside
        (`fresh`: the keys of a forward that recomputed that window)."""
        def cat(old, new):
            return torch.cat((old[:, :, :w0], new[:, :, :w1 - w0], old[:, :, w1:n]), dim=2)

        return KVCache([cat(o, f) for o, f in zip(self.keys, fresh.keys)],
                       [cat(o, f) for o, f in zip(self.values, fresh.values)])


@dataclass(frozen=True)
class ForwardOutput:
    logits: torch.Tensor  # [B, R, V] for the requested rows
    kv: KVCache | None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * rms_norm(x, self.eps)


def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) over the last dim in float32 maths, back in x's dtype; no weight (RMSNorm's core,
    and the weightless norms of Gemma-style models)."""
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def inv_frequencies(head_dim: int, theta: float, device: torch.device | None = None,
                    rotated: int | None = None) -> torch.Tensor:
    """RoPE inverse frequencies theta^(-2i / head_dim), one per pair of dims: [head_dim / 2]. With
    `rotated`, only the first `rotated` pairs turn and the others get frequency 0, so rotate-half over
    the whole head leaves them as they are (Gemma 4's "proportional" RoPE)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float) / head_dim))
    if rotated is not None:
        inv[rotated:] = 0.0
    return inv


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype):
    """cos/sin for explicit position ids [B, T] and inverse frequencies [D/2] -> [B, 1, T, D] each
    (float32 maths, then `dtype`)."""
    freqs = positions.float()[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [B, T, D]
    return emb.cos()[:, None].to(dtype), emb.sin()[:, None].to(dtype)


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin for explicit position ids [B, T] -> [B, 1, T, D] each (float32 maths); D is the
    rotated width (a partial-rotary family passes its rotary dim: frequencies come from it)."""
    return rope_cos_sin(positions, inv_frequencies(head_dim, theta, positions.device), dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rotate-half RoPE on the first cos.shape[-1] dims of each head, in `dtype` maths: [B, H, T, D]."""
    r = cos.shape[-1]
    rot = x[..., :r].to(dtype)
    rot = (rot * cos + rotate_half(rot) * sin).to(x.dtype)
    return rot if r == x.shape[-1] else torch.cat((rot, x[..., r:]), dim=-1)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           scale: float | None = None) -> torch.Tensor:
    """SDPA with grouped-query heads (query head h reads KV head h // (H / H_kv)): queries [B, H, T, D]
    over keys and values [B, H_kv, K, D] -> [B, T, H * D]. `scale` None: 1 / sqrt(D)."""
    B, H, T, D = q.shape
    if k.shape[1] != H:
        rep = H // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)  # [B, H, K, D]
        v = v.repeat_interleave(rep, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False, scale=scale)  # [B, H, T, D]
    return out.transpose(1, 2).reshape(B, T, H * D)


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        if cfg.fused_qkv:
            self.qkv = nn.Linear(cfg.d_model, (cfg.n_heads + 2 * cfg.n_kv_heads) * hd, bias=cfg.qkv_bias)
        else:
            self.q = nn.Linear(cfg.d_model, cfg.n_heads * hd, bias=cfg.qkv_bias)
            self.k = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=cfg.qkv_bias)
            self.v = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=cfg.qkv_bias)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.norm_eps)
            self.k_norm = RMSNorm(hd, cfg.norm_eps)
        self.o = nn.Linear(cfg.n_heads * hd, cfg.d_model, bias=cfg.out_bias)

    def _project(self, x: torch.Tensor):
        cfg = self.cfg
        B, T, _ = x.shape
        hd = cfg.head_dim
        if cfg.fused_qkv:
            qkv = self.qkv(x).view(B, T, cfg.n_heads + 2 * cfg.n_kv_heads, hd)
            q, k, v = qkv.split((cfg.n_heads, cfg.n_kv_heads, cfg.n_kv_heads), dim=2)
        else:
            q = self.q(x).view(B, T, cfg.n_heads, hd)
            k = self.k(x).view(B, T, cfg.n_kv_heads, hd)
            v = self.v(x).view(B, T, cfg.n_kv_heads, hd)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H(kv), T, D]
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def forward(self, x, cos, sin, mask, past_k, past_v, window):
        cfg = self.cfg
        q, k, v = self._project(x)  # [B, H, T, D], [B, Hkv, T, D] x2
        rope_dtype = torch.float32 if cfg.rope_full_precision else q.dtype
        q = apply_rope(q, cos, sin, rope_dtype)
        k = apply_rope(k, cos, sin, rope_dtype)
        fresh_k, fresh_v = k, v
        if past_k is not None:
            w0, w1 = window
            n_win = w1 - w0
            # canvas keys in position order (cached outside the window), then extras
            k = torch.cat((past_k[:, :, :w0], k[:, :, :n_win], past_k[:, :, w1:], k[:, :, n_win:]), dim=2)
            v = torch.cat((past_v[:, :, :w0], v[:, :, :n_win], past_v[:, :, w1:], v[:, :, n_win:]), dim=2)
        return self.o(attend(q, k, v, mask)), fresh_k, fresh_v


class Block(nn.Module):
    """Pre-norm attention then a SwiGLU MLP: dense (gate/up/down) or, with `moe`, a MoE layer."""

    def __init__(self, cfg: TransformerConfig, moe: bool = False):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        if moe:
            self.moe = MoE(cfg.d_model, cfg.moe)
        else:
            self.moe = None
            self.gate = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=False)
            self.up = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=False)
            self.down = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)

    def forward(self, x, cos, sin, mask, past_k, past_v, window):
        a, k, v = self.attn(self.attn_norm(x), cos, sin, mask, past_k, past_v, window)
        x = x + a
        h = self.mlp_norm(x)
        x = x + (self.moe(h) if self.moe is not None else self.down(F.silu(self.gate(h)) * self.up(h)))
        return x, k, v


class DiffusionTransformer(nn.Module):
    """Bidirectional transformer denoiser; see the module docstring for the key layout."""

    def __init__(self, cfg: TransformerConfig, shift: int = 0, opening_commit: bool = False,
                 block_causal: bool = False, stops_at_eos: bool = False, eos_stops_mid_block: bool = False,
                 prefills_prompt_blocks: bool = False, causal: bool = False):
        super().__init__()
        self.cfg = cfg
        # a causal LM (Qwen2): query i sees keys up to its own canvas position, and logits row i
        # predicts token i + 1 (ripple/platform/runtime/causal.py); the mask engine never runs one
        self.causal = causal
        self.shift = shift  # 1: the prediction for position i is read at i-1 (Dream)
        self.opening_commit = opening_commit  # the family's block opening (ripple/platform/runtime/models/family.py)
        self.block_causal = block_causal  # a block-diffusion family (LLaDA2): the engine's block rules
        self.stops_at_eos = stops_at_eos  # the family's decoding ends after a block with an EOS
        self.eos_stops_mid_block = eos_stops_mid_block  # stop_at_eos ends a row at its EOS, mid-block
        self.prefills_prompt_blocks = prefills_prompt_blocks  # with a cache: a forward over the prompt's whole blocks
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, moe=cfg.moe is not None and i >= cfg.dense_layers)
                                    for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    @property
    def vocab_size(self) -> int:
        return self.cfg.vocab_size

    @staticmethod
    def _causal_mask(T: int, kv: KVCache | None, window: tuple[int, int] | None,
                     attn_mask: torch.Tensor | None, device: torch.device) -> torch.Tensor:
        """`attn_mask` (padding; None, bool or additive) restricted to causal attention: the fresh token
        t sits at canvas position w0 + t and sees the keys of positions up to it (no extra segments)."""
        w0, w1 = window if kv is not None else (0, T)
        if kv is not None and T != w1 - w0:
            raise ValueError("a causal forward takes exactly the window's tokens (no extra segments)")
        K = T if kv is None else max(kv.length, w1)
        causal = torch.arange(K, device=device)[None] <= (w0 + torch.arange(T, device=device))[:, None]  # [T, K]
        if attn_mask is None:
            return causal[None, None]  # [1, 1, T, K]
        if attn_mask.dtype == torch.bool:
            return attn_mask & causal
        return attn_mask.masked_fill(~causal, float("-inf"))

    def forward(
        self,
        tokens: torch.Tensor,  # [B, T]
        positions: torch.Tensor,  # [B, T]
        attn_mask: torch.Tensor | None = None,  # [B, 1|H, T, K] bool (True = visible) or additive
        kv: KVCache | None = None,
        window: tuple[int, int] | None = None,
        return_kv: bool = False,
        logits_rows: torch.Tensor | None = None,  # [R] query rows to project; None = all
    ) -> ForwardOutput:
        if kv is not None and window is None:
            raise ValueError("a KV cache needs the canvas window the fresh tokens fill")
        x = self.embed(tokens)  # [B, T, d]
        cos, sin = rope_tables(positions, self.cfg.rotary_dim, self.cfg.rope_theta,
                               torch.float32 if self.cfg.rope_full_precision else x.dtype)
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            attn_mask = attn_mask.to(x.dtype)
        if self.causal:
            attn_mask = self._causal_mask(tokens.shape[1], kv, window, attn_mask, tokens.device)
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            pk = kv.keys[i] if kv is not None else None
            pv = kv.values[i] if kv is not None else None
            x, k, v = layer(x, cos, sin, attn_mask, pk, pv, window)
            if return_kv:
                new_k.append(k)
                new_v.append(v)
        if logits_rows is not None:
            x = x[:, logits_rows]  # [B, R, d]
        logits = self.head(self.norm(x))  # [B, R, V]
        return ForwardOutput(logits, KVCache(new_k, new_v) if return_kv else None)
