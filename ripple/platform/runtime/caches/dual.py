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
"""
from __future__ import annotations

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
        refresh = self.sub_blocks and cut < 0  # a forward over the whole block refreshes its keys
        if self.sub_blocks:
            for r in group:
                self.snap[r] = refresh
        return refresh

    def refresh(self, kv: KVCache, fresh: KVCache, group: list[int], win: Window) -> None:
        at = torch.tensor([win.row_pos[r] for r in group], device=self.run.e.device)
        for lk, fk in ((kv.keys, fresh.keys), (kv.values, fresh.values)):
            for old, new in zip(lk, fk):
                old[at, :, win.lo:win.hi] = new[:, :, win.lo:win.hi]
