"""Applying a decoder's decisions to the canvas (DESIGN.md section 4), apart from the block loop
that asks for them (`_Run` in ripple/platform/runtime/engine.py).

- `check_plan`: the engine acts on what a decoder declares, so a plan that asks for more (variants
  without `uses_lookahead`, an edit without `edits_tokens`, ...) is a protocol error;
- `apply_decision`: a step's commits, edits and remasks are checked against the protocol's
  invariants (inside the current sub-block, commits into masks, edits and remasks of decoded,
  unfixed positions, never the mask id) and written together, edits with commits, then remasks;
- `EosStops`: where a row ends at an end-of-sequence id, after a block (`stop_at_eos`) or right
  after a decision (`eos_early_stop`; a family that `eos_stops_mid_block` under `stop_at_eos`).
"""
from __future__ import annotations

from typing import Sequence

import torch

from ...decoders.base import BlockState, Commit, Plan, Scheduler
from ...errors import RippleError


def check_plan(dec: Scheduler, plan: Plan) -> None:
    """The engine acts on what a decoder declares: a plan that asks for more is a protocol error."""
    if plan.variants is not None and not dec.uses_lookahead:
        raise RippleError(f"decoder {dec.name!r} planned lookahead variants but does not declare uses_lookahead")
    if plan.shadow and not dec.uses_shadow:
        raise RippleError(f"decoder {dec.name!r} asked for a shadow forward but does not declare uses_shadow")
    if len(plan.edit) and not dec.edits_tokens:
        raise RippleError(f"decoder {dec.name!r} planned token edits but does not declare edits_tokens")
    if plan.sample is not None or plan.keep is not None or plan.carry is not None or plan.end:
        raise RippleError(f"decoder {dec.name!r} planned a renoising step on a mask-noise family")
    if plan.defer and not dec.defers_masks:
        raise RippleError(f"decoder {dec.name!r} ended a block with masks left but does not declare defers_masks")
    if plan.extent is not None:
        if not dec.shortens_canvas:
            raise RippleError(f"decoder {dec.name!r} planned a shortened canvas but does not declare shortens_canvas")
        if plan.variants is not None or plan.shadow:
            raise RippleError(f"decoder {dec.name!r} planned a shortened canvas with extra segments")
    if plan.truncate is not None and not dec.cuts_canvas:
        raise RippleError(f"decoder {dec.name!r} cut the canvas but does not declare cuts_canvas")


def _inside(dec: Scheduler, at: torch.Tensor, L: int, window: tuple[int, int], verb: str) -> None:
    """Block positions `at` a plan writes lie in the current block [0, L) and its sub-block `window`."""
    if bool(((at < 0) | (at >= L)).any()):
        raise RuntimeError(f"decoder {dec.name!r} {verb} outside the current block")
    if bool(((at < window[0]) | (at >= window[1])).any()):
        raise RuntimeError(f"decoder {dec.name!r} {verb} outside the current sub-block")


def apply_decision(dec: Scheduler, mask_id: int, st: BlockState, commit: Commit, remask: torch.Tensor | None,
                   edit: Commit | None) -> list[list[int]]:
    """Write a decoder's commits and edits together (then remasks) into `st.tokens` (a view into the
    canvas), checking the protocol's invariants; returns the edits as [block position, old token, new token]."""
    L = st.tokens.shape[0]
    edited: list[list[int]] = []
    if edit is not None and len(edit):
        at = edit.positions.to(st.tokens.device)
        new = edit.tokens.to(st.tokens.device)
        _inside(dec, at, L, st.window, "edited")
        if bool(st.block_masked[at].any()):
            raise RuntimeError(f"decoder {dec.name!r} edited a masked position (that is a commit)")
        if bool(st.fixed[at].any()):
            raise RuntimeError(f"decoder {dec.name!r} edited a fixed position (prompt or block opening)")
        if bool((new == mask_id).any()):
            raise RuntimeError(f"decoder {dec.name!r} edited a token to the mask id")
        if bool((new == st.tokens[at]).any()) or at.unique().numel() != at.numel():
            raise RuntimeError(f"decoder {dec.name!r} planned an edit that changes nothing")
        edited = [[p, o, n] for p, o, n in zip(at.tolist(), st.tokens[at].tolist(), new.tolist())]
    pos = commit.positions.to(st.tokens.device)
    if len(commit):
        tok = commit.tokens.to(st.tokens.device)
        _inside(dec, pos, L, st.window, "committed")
        if not bool(st.masked[pos].all()):
            raise RuntimeError(f"decoder {dec.name!r} committed an already decoded position")
        if bool((tok == mask_id).any()):
            raise RuntimeError(f"decoder {dec.name!r} committed the mask id")
    if remask is not None and remask.numel():
        back = remask.to(st.tokens.device)
        _inside(dec, back, L, st.window, "remasked")
        if bool(st.block_masked[back].any()):
            raise RuntimeError(f"decoder {dec.name!r} remasked a position that is not decoded")
        if bool(st.fixed[back].any()):
            raise RuntimeError(f"decoder {dec.name!r} remasked a position committed at the block opening")
        if bool(torch.isin(back, pos).any()):
            raise RuntimeError(f"decoder {dec.name!r} remasked a position it commits in the same step")
    if len(commit):
        st.tokens[pos] = tok
    if edited:
        st.tokens[at] = new
    if remask is not None and remask.numel():
        st.tokens[back] = mask_id
    return edited


class EosStops:
    """Which rows of a run's canvas [B, N] have ended at an end-of-sequence id (`stopped`), and the
    stop itself: every column from the stop on reads as end-of-sequence (the pad id for a family
    without one). `early`: decisions may end a row mid-block (never while tokens may be rewritten);
    `mid`: a family that `eos_stops_mid_block` under `stop_at_eos` (checked after every decision)."""

    def __init__(self, canvas: torch.Tensor, starts: Sequence[int], eos_ids: Sequence[int], mask_id: int,
                 pad_id: int, early: bool, mid: bool):
        self.canvas, self.starts, self.eos_ids, self.mask_id = canvas, starts, tuple(eos_ids), mask_id
        self.fill = self.eos_ids[0] if self.eos_ids else pad_id
        self.early, self.mid = early, mid
        self.stopped = [False] * canvas.shape[0]

    def first_eos(self, r: int, upto: int) -> int | None:
        """Canvas column of the first end-of-sequence id in row r's response before `upto`, or None."""
        seg = self.canvas[r, self.starts[r]:upto]
        hit = torch.isin(seg, torch.tensor(self.eos_ids, dtype=seg.dtype, device=seg.device))
        return self.starts[r] + int(hit.int().argmax()) if bool(hit.any()) else None

    def stop(self, r: int, after: int) -> None:
        """End row r: everything from column `after` on reads as end-of-sequence."""
        self.stopped[r] = True
        self.canvas[r, after:] = self.fill

    def after_decision(self, r: int, commit: Commit, be: int) -> None:
        """`eos_early_stop`: after a decision that committed an EOS, end the row if no mask lies
        between its response start and the first EOS before `be` (the rest of the block is never
        decoded). Under `mid` every decision checks (its EOS may have been committed before the masks
        ahead of it were filled)."""
        if not self.early or self.stopped[r]:
            return
        if not self.mid and (not len(commit) or not any(int(t) in self.eos_ids for t in commit.tokens.tolist())):
            return
        first = self.first_eos(r, be)
        if first is not None and not bool((self.canvas[r, self.starts[r]:first] == self.mask_id).any()):
            self.stop(r, first + 1)
