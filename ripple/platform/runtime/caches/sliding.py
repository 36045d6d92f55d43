"""Cache policy `sliding` (APD's sliding KV window, danielmisrael/apd; shared/golden/README.md "APD"):
each forward recomputes [left, right) of one row, where right = first mask + the decoder's `horizon` (M,
capped at the canvas end) and left = c - W + 1 (`kv_window` W, c the first mask when the previous step
began, never before the row's first position); the forward sees nothing from right on, and reads the keys
of 0..left-1 from the row's own store, which afterwards holds 0..right-1. A stored position thus keeps the
keys of the last forward whose window held it, computed while later positions held masks (stale), as
APD's crop-then-extend cache does. The block opening (APD's step 0) recomputes [0, right) with no cache.

The windows follow each row's first mask, so a step's rows are grouped by window (`narrow` returns the
columns [left, right) as the grouping key) and each row keeps its own keys. Only the rows a decoder reads
(the window's predictions, shifted as the family reads them: row j - 1 predicts j, and `left`'s own row
stands for `left`) are rewritten in `BlockState.logits`; the others keep their last forward's. One block
per response: APD has none (its decoder refuses block_length != gen_length).
"""
from __future__ import annotations

from dataclasses import replace

import torch

from ....decoders.base import BlockState, Plan
from ..models.transformer import KVCache
from .base import NO_NARROWING, CachePolicy, Window


class SlidingCache(CachePolicy):
    name = "sliding"
    # the row before a row's first mask is always recomputed (left <= c < first mask), so a shifted family
    # reads the first mask's prediction fresh and needs no opening commit (`decides_first_position`)
    recomputes_context = True

    def __init__(self, run):
        super().__init__(run)
        dec = run.decoder
        if dec.horizon is None or dec.kv_window is None:
            raise RuntimeError(f"cache policy 'sliding' needs a decoder that declares horizon and kv_window; "
                               f"{dec.name!r} declares none")
        self.keys: dict[int, KVCache] = {}  # row -> keys of canvas columns [0, its last window's right)
        self.first: dict[int, int] = {}  # row -> column of its first mask when its last forward ran (c)

    def window(self, bs: int, be: int, ext: int) -> tuple[int, int]:
        return 0, ext  # (the steps' forwards are `narrow`'s windows)

    def _right(self, r: int, cur: int, ext: int) -> int:
        return min(cur + self.run.decoder.horizon, ext, self.run.ends[r])

    def open(self, blk: int, rows: list[int], win: Window) -> tuple[torch.Tensor, KVCache | None]:
        if blk:
            raise RuntimeError("cache policy 'sliding' decodes a response as one block")
        right = self._right(rows[0], win.lo, win.extent)  # every row's first mask is the block start
        logits, kv = self.opening_forward(rows, None, 0, replace(win, w1=right, extent=right))  # [G, L, V]
        for i, r in enumerate(rows):
            self.keys[r] = kv.select(torch.tensor([i], device=self.run.e.device))
            self.first[r] = win.lo
        return logits, None

    def narrow(self, r: int, st: BlockState, plan: Plan | None, sub: tuple[int, int] | None) -> tuple[int, int]:
        if sub is None:
            return NO_NARROWING
        run = self.run
        cur = run.origin + st.block_index * run.cfg.block_length + int(st.block_masked.nonzero()[0])
        left = max(self.first[r] - run.decoder.kv_window + 1, run.starts[r] - run.lens[r])  # position 0 at most
        return left, self._right(r, cur, run.N if run.limit[r] is None else run.limit[r])

    def forward_narrow(self, group: list[int], span: tuple[int, int], states: dict[int, BlockState],
                       kv: KVCache | None, win: Window) -> None:
        """Recompute columns [left, right) of `group`'s rows on their stored keys of [0, left)."""
        run, e = self.run, self.run.e
        left, right = span
        crops = [self.keys[r].truncate(left) for r in group]
        past = KVCache([torch.cat(k) for k in zip(*(c.keys for c in crops))],
                       [torch.cat(v) for v in zip(*(c.values for c in crops))])  # [G, H, left, D] per layer
        pick = run.select(group)
        out, kept = e.forward_window(pick(run.canvas), pick(run.positions), pick(run.pad), past, left, right,
                                     win.lo, win.hi, None, None, extent=right, return_kv=True)  # [G, right - left, V]
        run.count(group)
        a = max(left, win.lo)  # the first block column the window predicts
        for i, r in enumerate(group):
            st = states[r]
            rows = torch.cat((out[i, :1], out[i, :-1])) if e.shift else out[i]  # [right - left, V]: column left + k
            logits = st.logits.clone()  # [L, V]
            logits[a - win.lo:right - win.lo] = rows[a - left:]
            st.logits = logits
            self.keys[r] = kept.select(torch.tensor([i], device=e.device))
            self.first[r] = win.lo + int(st.block_masked.nonzero()[0])

    def keys_for(self, kv, group, win):
        return None  # each row reads its own store (`forward_narrow`)

    def closed(self, rows: list[int]) -> None:
        for r in rows:
            self.keys.pop(r, None)
            self.first.pop(r, None)
