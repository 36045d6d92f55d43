"""Next-token logits of a causal LM (a verifier beside the dLLM, e.g. APD's): plain forwards, no engine.

A causal family (`Family.causal`, e.g. qwen2) is loaded by `load_causal`
(ripple/platform/runtime/loading.py); its module is the dLLMs' transformer under causal attention, so
row i of the logits is the distribution of token i + 1. Logits come back in float32 whatever the
model's dtype, as APD's rules read them (shared/golden/README.md, "APD").
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...errors import RippleError
from .models.transformer import KVCache


@dataclass(frozen=True)
class CausalOutput:
    logits: torch.Tensor  # [B, L, V] float32: row i predicts the token after input i
    kv: KVCache  # keys/values of every position seen so far (the past's, then these L)


def _module(model):
    """The module of a LoadedModel, or `model` itself (a module, or the engine's `Counted` wrapper of one,
    which must stay wrapped so its calls count: ripple/platform/runtime/auxiliary.py); refused unless causal."""
    from .loading import LoadedModel

    module = model.model if isinstance(model, LoadedModel) else model
    if not getattr(module, "causal", False):
        raise RippleError("next-token logits need a causal LM (load it with load_causal); this model is a diffusion LM")
    return module


@torch.no_grad()
def causal_forward(model, ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                   past: KVCache | None = None) -> CausalOutput:
    """Logits for `ids` [B, L] and the keys/values to extend them with later.

    `past`: the cache a previous call returned (its P positions); `ids` then sit at positions P..P+L-1.
    `attention_mask` [B, P + L] (1 = a real token, 0 = padding; padding only on the left): position ids
    count real tokens only, as transformers' generate derives them, so a left-padded row computes what it
    would alone. None: every token is real."""
    module = _module(model)
    B, L = ids.shape
    P = past.length if past is not None else 0
    device = module.embed.weight.device
    ids = ids.to(device)
    if attention_mask is None:
        positions = torch.arange(P, P + L, device=device).expand(B, L)  # [B, L]
        attn = None
    else:
        real = attention_mask.to(device).bool()  # [B, P + L]
        if real.shape != (B, P + L):
            raise RippleError(f"attention_mask has shape {tuple(real.shape)}; expected {(B, P + L)} "
                              f"(past {P} + {L} ids)")
        positions = (real.long().cumsum(1) - 1).clamp(min=0)[:, P:]  # [B, L]
        # real queries read real keys, pad queries every key (no all -inf row, whose NaNs would reach real
        # rows through the values), as the engine's padding_mask; the module adds causality
        attn = real[:, None, None, :] | ~real[:, None, P:, None]  # [B, 1, L, P + L]
    out = module(ids, positions, attn_mask=attn, kv=past, window=(P, P + L) if past is not None else None,
                 return_kv=True)
    kv = out.kv if past is None else past.merge(out.kv, P, P + L, P + L)
    return CausalOutput(out.logits.float(), kv)  # [B, L, V]


def next_token_logits(model, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """float32 logits [B, L, V] of a causal LM for token ids [B, L]: row i is the distribution of the
    token after ids[:, i] (see `causal_forward` for `attention_mask`)."""
    return causal_forward(model, ids, attention_mask).logits
