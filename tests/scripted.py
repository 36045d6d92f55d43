"""A scripted stand-in for the model, for decoder-logic tests.

It speaks the DiffusionTransformer forward protocol (window, KV cache, attention mask,
logits rows) but its "keys" are the tokens themselves, so a query's logits are a
function the test controls of (its position, the (position, token) pairs it can see).
A stale cache therefore behaves like a real stale cache, and the packed lookahead's
visibility rule is observable.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable

import torch

Script = Callable[[int, tuple[tuple[int, int], ...]], torch.Tensor]


@dataclass
class TokenCache:
    tokens: torch.Tensor  # [B, N]
    positions: torch.Tensor  # [B, N]

    def select(self, rows):
        return TokenCache(self.tokens[rows], self.positions[rows])

    def truncate(self, n):
        return TokenCache(self.tokens[:, :n], self.positions[:, :n])

    def merge(self, fresh, w0, w1, n):
        def cat(old, new):
            return torch.cat((old[:, :w0], new[:, :w1 - w0], old[:, w1:n]), dim=1)

        return TokenCache(cat(self.tokens, fresh.tokens), cat(self.positions, fresh.positions))


@dataclass
class _Out:
    logits: torch.Tensor
    kv: TokenCache | None


def hashed_script(vocab: int, scale: float = 4.0, seed: int = 0) -> Script:
    """Deterministic pseudo-random logits that depend on everything a query sees."""

    def script(pos, visible):
        h = hashlib.sha256(repr((seed, pos, visible)).encode()).digest()
        g = torch.Generator().manual_seed(int.from_bytes(h[:8], "little"))
        return torch.randn(vocab, generator=g) * scale

    return script


class ScriptedModel:
    def __init__(self, vocab: int, script: Script, shift: int = 0, block_causal: bool = False):
        self.vocab_size = vocab
        self.script = script
        self.shift = shift
        self.block_causal = self.stops_at_eos = block_causal  # a block-diffusion family (LLaDA2's rules)
        self.calls = 0  # forward calls
        self.row_calls = 0  # sum over calls of batch rows
        self.logits_rows: list[int] = []  # per call: the query rows projected to logits

    def __call__(self, tokens, positions, attn_mask=None, kv=None, window=None, return_kv=False, logits_rows=None):
        self.calls += 1
        B, T = tokens.shape
        self.row_calls += B
        if kv is not None:
            w0, w1 = window
            n = w1 - w0
            key_tok = torch.cat((kv.tokens[:, :w0], tokens[:, :n], kv.tokens[:, w1:], tokens[:, n:]), 1)
            key_pos = torch.cat((kv.positions[:, :w0], positions[:, :n], kv.positions[:, w1:], positions[:, n:]), 1)
        else:
            key_tok, key_pos = tokens, positions
        rows = range(T) if logits_rows is None else [int(r) for r in logits_rows]
        self.logits_rows.append(len(rows))
        out = torch.empty(B, len(rows), self.vocab_size)
        for b in range(B):
            for j, q in enumerate(rows):
                if attn_mask is None:
                    vis = torch.ones(key_tok.shape[1], dtype=torch.bool)
                else:
                    vis = attn_mask[b, 0, q]
                    vis = vis if vis.dtype == torch.bool else vis == 0
                seen = tuple(sorted((int(p), int(t)) for p, t, v in zip(key_pos[b], key_tok[b], vis) if v))
                out[b, j] = self.script(int(positions[b, q]), seen)
        cache = TokenCache(tokens.clone(), positions.clone()) if return_kv else None
        return _Out(out, cache)


def peaked(vocab: int, token: int, p: float, runner_up: int | None = None, floor: float = -30.0) -> torch.Tensor:
    """Logits [V] whose softmax puts (almost exactly) p on `token` and 1 - p on `runner_up`."""
    logits = torch.full((vocab,), floor)
    logits[token] = math.log(p)
    logits[token + 1 if runner_up is None else runner_up] = math.log(1.0 - p)
    return logits


def spread(vocab: int, token: int, p: float) -> torch.Tensor:
    """Logits [V] whose softmax puts p on `token` and spreads 1 - p evenly over the rest."""
    logits = torch.full((vocab,), math.log((1.0 - p) / (vocab - 1)))
    logits[token] = math.log(p)
    return logits


def view(seen: tuple[tuple[int, int], ...], mask_id: int) -> tuple[dict[int, int], bool]:
    """The canvas as a query sees it ({position: token}) and whether the query is a shadow row.

    A shadow row sees the block twice (the canvas and the all-mask shadow), so positions
    repeat; where they do, the canvas token wins, so its own hidden position reads as masked.
    """
    canvas: dict[int, int] = {}
    for p, t in seen:
        if t != mask_id or p not in canvas:
            canvas[p] = t
    return canvas, len(canvas) < len(seen)
