"""Cache policy `dual` (Fast-dLLM's dual cache): a step's forward recomputes only the block [bs, be);
the keys before and after it come from the block-opening forward (prefix.py says what the opening
reads and keeps; for block diffusion, `dual` is `prefix`'s window).

Sub-blocks (`GenerationConfig.sub_block_length`): once the current sub-block [sb0, sb1)'s first
position is decoded (a shifted family reads that position's prediction from the row before the
sub-block), a plain forward (no segments, no shortened canvas, no rows beyond the block) recomputes
only the sub-block, and the row's block keys come from a forward over the whole block that its
decisions read: the rest of the block's keys are those of the last such forward, stale where later
commits changed the block, as Fast-dLLM v2's block cache is; every forward over the whole block
refreshes them.

A canvas a decoder cut (`Plan.truncate`, Learn2PD): the block's remaining forwards end their window at
the cut but keep reading the keys the opening stored outside it, the removed columns' included; those
columns become padding once the block is done (from the next opening on). The block's own stored keys
are rewritten by every forward over the whole block (as Fast-dLLM's dual cache does in place), so block
positions past a cut read the last such forward's keys.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from ....decoders.base import BlockState, Plan
from ..models.transformer import KVCache
from .base import NO_NARROWING, Window
from .prefix import PrefixCache


class DualCache(PrefixCache):
    name = "dual"

    def __init__(self, run):
        super().__init__(run)
        self.sub_blocks = run.cfg.sub_block < run.cfg.block_length
        # row -> whether its stored block keys come from a forward its decisions read (sub-blocks only)
        self.snap: dict[int, bool] = {}
        # the stored block keys are refreshed by every forward over the whole block: with sub-blocks, and
        # for a decoder that cuts the canvas (the block positions past a cut read them)
        self.refreshes = self.sub_blocks or run.decoder.cuts_canvas
        self.pad_at_close: dict[int, int] = {}  # row -> column of a cut in this block, padding once it is done

    def window(self, bs: int, be: int, ext: int) -> tuple[int, int]:
        return bs, be

    def opened(self, r: int, st: BlockState) -> None:
        # the opening computed the block as the first decision reads it unless it commits at the opening
        if self.sub_blocks:
            self.snap[r] = not (self.run.opening and bool(st.block_masked[0]))

    def narrow(self, r: int, st: BlockState, plan: Plan | None, sub: tuple[int, int] | None) -> tuple[int, int]:
        plain = not self.run.decoder.needs_rows_beyond_block and (
            plan is None or (plan.variants is None and not plan.shadow and plan.extent is None))
        if not (self.sub_blocks and plain and sub is not None and self.snap.get(r)) or bool(st.block_masked[sub[0]]):
            return NO_NARROWING
        return sub

    def forward_narrow(self, group: list[int], span: tuple[int, int], states: dict[int, BlockState],
                       kv: KVCache, win: Window) -> None:
        """Recompute block offsets [a, b) alone against the stored keys of the canvas and of the rest of
        the block; the rows it predicts (positions a + shift .. b - 1) replace theirs, the others keep
        theirs."""
        run, e, s = self.run, self.run.e, self.run.head  # every opening commits here: the first `head` rows stay
        a, b = span
        pick = run.select(group)
        out = e.forward_window(pick(run.canvas), pick(run.positions), pick(run.pad), kv, win.lo + a, win.lo + b,
                               win.lo, win.hi, None, torch.arange(b - a - s, device=e.device), extent=win.extent,
                               block=win.causal)  # [G, b - a - s, V]
        run.count(group)
        for i, r in enumerate(group):
            st = states[r]
            st.logits = torch.cat((st.logits[:a + s], out[i], st.logits[b:]))  # [L, V]
            st.shadow = None

    def prepare_forward(self, group: list[int], cut: int) -> bool:
        refresh = self.refreshes and cut < 0  # a forward over the whole block refreshes its keys
        if self.sub_blocks:
            for r in group:
                self.snap[r] = refresh
        return refresh

    def refresh(self, kv: KVCache, fresh: KVCache, group: list[int], win: Window) -> None:
        at = torch.tensor([win.row_pos[r] for r in group], device=self.run.e.device)
        kv.overwrite(at, fresh, win.lo, win.hi)

    def cut_window(self, win: Window, kv: KVCache | None, end: int) -> tuple[Window, KVCache | None]:
        # the window ends at the cut; the stored keys (the canvas's, to the extent) stay the opening's
        return replace(win, w1=min(win.w1, end), next=False), kv

    def cut(self, r: int, col: int) -> None:
        self.pad_at_close[r] = col  # the opening's stored keys of those columns stay readable until then

    def closed(self, rows: list[int]) -> None:
        for r in rows:
            if r in self.pad_at_close:
                self.run.pad[r, self.pad_at_close.pop(r):] = True
