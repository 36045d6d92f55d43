"""Cache policy `prefix` (Fast-dLLM's prefix cache): a step's forward recomputes [block start,
extent); the keys before the block come from the block-opening forward and are reused until the
next block opens. What the opening reads and keeps is shared with `dual` (dual.py), which keeps
the block's suffix too:

- block diffusion (a `block_causal` family, whose extent ends at the block): the opening recomputes
  only the previous block, finished since the last opening, and the current one; the keys of the
  blocks before come from the previous opening, each computed after its block's last commit, so
  `prefix` is exact and `dual` is the same window;
- a family that `prefills_prompt_blocks` runs, before its first block opens, a forward of its own over
  the prompt's whole blocks (its reference's prefill): the opening then computes the block against
  their keys or, when the block starts with a mask (a shifted family commits that position at the
  opening), opens from that forward's last row alone.
"""
from __future__ import annotations

import torch

from ..models.transformer import KVCache
from .base import CachePolicy, Window, kv_rows


class PrefixCache(CachePolicy):
    name = "prefix"

    def __init__(self, run):
        super().__init__(run)
        # block diffusion: (keys of the last opening, its rows' batch indices), read by the next opening
        self.finished: tuple[KVCache, dict[int, int]] | None = None
        self.prefills = run.e.prefills_prompt_blocks and run.origin > 0  # the prompt has whole blocks

    def window(self, bs: int, be: int, ext: int) -> tuple[int, int]:
        return bs, ext

    def open(self, blk: int, rows: list[int], win: Window) -> tuple[torch.Tensor, KVCache]:
        run, e = self.run, self.run.e
        bs, L = win.lo, win.hi - win.lo
        past, o0, opened = None, 0, rows  # opened: the rows the opening forward computes
        if e.block_causal and blk > 0:  # keys before the previous block: from the previous opening
            o0 = bs - L
            past = kv_rows(*self.finished, rows, e.device)
        pre = self.prefill(rows, bs) if blk == 0 and self.prefills else None
        if pre is not None:  # the opening computes the block against the prompt's blocks' keys
            o0 = bs
            # a block that starts with a mask opens from the prefill's last row: no opening forward
            opened = [r for r in rows if run.starts[r] > bs] if run.head else rows
            past = kv_rows(pre[1], {r: i for i, r in enumerate(rows)}, opened, e.device)
        logits = kv = None
        if opened:
            logits, kv = self.opening_forward(opened, past, o0, win)
        if pre is not None and len(opened) < len(rows):
            logits, kv = _with_prefill(rows, opened, pre, logits, kv, L * (1 + win.next), win.hi)
        if e.block_causal:
            self.finished = (kv, {r: i for i, r in enumerate(rows)})
        return logits, kv

    def prefill(self, rows: list[int], bs: int) -> tuple[torch.Tensor, KVCache]:
        """The forward over canvas columns [0, bs), the prompt's whole blocks: their keys, and the last
        row's logits [G, V] (the prediction of column bs), counted for the rows with prompt tokens there."""
        run, e, L = self.run, self.run.e, self.run.cfg.block_length
        sub = run.select(rows)
        logits, kv = e.forward_window(sub(run.canvas), sub(run.positions), sub(run.pad), None, 0, bs, bs - L, bs,
                                      None, torch.tensor([bs - 1], device=e.device), extent=bs, block=L,
                                      return_kv=True)  # [G, 1, V]
        run.count([r for r in rows if run.lens[r] >= L])
        return logits[:, 0], kv


def _with_prefill(rows, opened, pre, logits, kv, n_rows: int, be: int):
    """The opening's logits [G, n_rows, V] and keys [0, be) for every row, where the rows not in
    `opened` opened from the prefill alone: its last row stands for their block's rows (only the first,
    the opening commit, is read before their next forward), and their block's keys are zeros until
    that forward, whose window covers the block, computes them."""
    pre_logits, pre_kv = pre  # [G, V], keys [0, bs)
    out = pre_logits[:, None].expand(-1, n_rows, -1).clone()  # [G, n_rows, V]
    at = torch.tensor([rows.index(r) for r in opened], dtype=torch.long, device=pre_logits.device)
    if logits is not None:
        out[at] = logits

    def grow(pre_t, new_t):  # [G, H, bs, D] (and the opened rows' [G', H, be, D]) -> [G, H, be, D]
        full = pre_t.new_zeros(*pre_t.shape[:2], be, pre_t.shape[3])
        full[:, :, :pre_t.shape[2]] = pre_t
        if new_t is not None:
            full[at] = new_t[:, :, :be]
        return full

    fresh = kv or KVCache([None] * len(pre_kv.keys), [None] * len(pre_kv.values))
    return out, KVCache([grow(p, n) for p, n in zip(pre_kv.keys, fresh.keys)],
                        [grow(p, n) for p, n in zip(pre_kv.values, fresh.values)])
