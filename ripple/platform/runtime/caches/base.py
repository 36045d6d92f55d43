"""What a KV cache policy owns, and the block geometry its forwards share (DESIGN.md section 3).

A policy decides, for one `generate` call: which canvas window a step's forward recomputes
(`window`), where the block-opening forward's keys come from and whether it keeps them (`open`),
and, for the policies that have them, narrower windows between two such forwards and when their
stored keys are refreshed (`narrow`, `forward_narrow`, `prepare_forward`, `refresh`). The run (`_Run` in
ripple/platform/runtime/engine.py) keeps the block loop; it asks its policy and never branches on
the policy's name. One instance lives per run, so a policy may keep keys across blocks.

The run is named, not imported (engine.py imports this package): a policy reads its canvas
(`canvas`, `positions`, `pad` [B, N]), its rows' layout (`origin`, `starts`, `lens`, `head`,
`opening`), selects rows of a batch tensor with `select(...)` and counts forwards with `count(...)`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ....decoders.base import BlockState, Plan
from ..models.transformer import KVCache

NO_NARROWING = (0, 0)  # `narrow`'s answer: the step's forward covers the policy's window


@dataclass(frozen=True)
class Window:
    """Canvas columns of one block's forwards: recomputed window [w0, w1), block [lo, hi)."""

    w0: int
    w1: int
    lo: int
    hi: int
    row_pos: dict[int, int]  # batch row -> its index among the block's rows (the KV cache's rows)
    next: bool  # also compute the next block's rows (the decoder needs rows beyond the block)
    extent: int  # the forward's canvas is columns [0, extent)
    causal: int | None  # block length of block-causal attention (None: bidirectional)


class CachePolicy:
    """A KV cache policy (module docstring). Subclasses set `name` and `window`; the defaults are
    those of a policy that recomputes its whole window every forward and keeps no state."""

    name: ClassVar[str]
    stores_keys: ClassVar[bool] = True  # the block-opening forward returns the canvas's keys for the steps
    # every forward recomputes the canvas before the block, so the row before the block is always fresh
    # (a decoder that `decides_first_position` then needs no opening commit: Engine.commits_at_opening)
    recomputes_context: ClassVar[bool] = False

    def __init__(self, run: Any):
        self.run = run

    def window(self, bs: int, be: int, ext: int) -> tuple[int, int]:
        """Canvas columns [w0, w1) a step's forward recomputes, for the block [bs, be) of a canvas
        whose forwards see columns [0, ext)."""
        raise NotImplementedError

    def open(self, blk: int, rows: list[int], win: Window) -> tuple[torch.Tensor, KVCache | None]:
        """The block-opening forward for `rows`: logits [G, L (+ L for the next block's rows), V] of
        the block's predictions, and the keys the steps' forwards read outside their window."""
        return self.opening_forward(rows, None, 0, win)

    def opening_forward(self, rows: list[int], past: KVCache | None, o0: int,
                        win: Window) -> tuple[torch.Tensor, KVCache | None]:
        """Recompute canvas columns [o0, extent) for `rows` (keys before o0 from `past`), counted for
        them: the block's predictions (the prediction for canvas position i is read at row i - shift),
        then, for a decoder that reads them, the next block's (window rows, or beyond the extent a
        copy of that block)."""
        run, e = self.run, self.run.e
        bs, be, ext = win.lo, win.hi, win.extent
        L, s = be - bs, e.shift
        beyond = (be, be + L) if win.next and be >= ext else None
        ar = lambda n: torch.arange(n, device=e.device)  # noqa: E731
        # (a block at column 0 holds the prompt there: its first row, never read, stands in for the one before)
        want = torch.cat([(ar(L) + bs - s - o0).clamp(min=0)]
                         + ([ar(L) + (ext - o0 if beyond else be - s - o0)] if win.next else []))
        pick = run.select(rows)
        out = e.forward_window(pick(run.canvas), pick(run.positions), pick(run.pad), past, o0, ext, bs, be,
                               None, want, beyond=beyond, extent=ext, block=win.causal,
                               return_kv=self.stores_keys)  # [G, len(want), V]
        run.count(rows)
        return out if self.stores_keys else (out, None)

    def opened(self, r: int, st: BlockState) -> None:
        """Row r's block state right after the opening forward, before any commit."""

    def narrow(self, r: int, st: BlockState, plan: Plan | None, sub: tuple[int, int] | None) -> tuple[int, int]:
        """Block offsets row r's next forward may recompute alone instead of the window (`sub`: the
        sub-block it decides in next, None when the block is full), or NO_NARROWING."""
        return NO_NARROWING

    def forward_narrow(self, group: list[int], span: tuple[int, int], states: dict[int, BlockState],
                       kv: KVCache, win: Window) -> None:
        """The forward of `narrow`'s span for `group` (policies that narrow)."""
        raise NotImplementedError(f"cache policy {self.name!r} does not narrow its window")

    def keys_for(self, kv: KVCache | None, group: list[int], win: Window) -> KVCache | None:
        """The stored keys of `group`'s rows (the opening's `kv` holds every row of the block)."""
        return None if kv is None else kv_rows(kv, win.row_pos, group, self.run.e.device)

    def prepare_forward(self, group: list[int], cut: int) -> bool:
        """A forward over the window is about to run for `group` (`cut` >= 0: on a shortened canvas):
        whether it also refreshes the block's stored keys (then `refresh` gets them)."""
        return False

    def refresh(self, kv: KVCache, fresh: KVCache, group: list[int], win: Window) -> None:
        """Write the block's keys of a refreshing forward (`fresh`, `group`'s rows) into `kv`."""


def kv_rows(kv: KVCache, index: dict[int, int], rows: list[int], device: torch.device) -> KVCache:
    """A cache (whose batch row of run row r is index[r]) for `rows` only; no copy when they are all of it."""
    if len(rows) == len(index):
        return kv
    return kv.select(torch.tensor([index[r] for r in rows], dtype=torch.long, device=device))
