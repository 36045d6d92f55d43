"""`slow_fast`: SlowFast sampling (LiangrunFlora/Slow-Fast-Sampling dd9958f,
`generate_slow_fast_sampling.py`, `generate_slow_fast_sampling`).

A block is decoded in sub-cycles, each a slow phase then a fast one. Slow (explore): exactly
`explore_steps` forwards; each commits in the scope [prev, B) (every masked position with p >=
fill_tau if more than one has it, else the most confident one) and, until the span is settled,
estimates how far confident predictions reach: est = 1 + the largest offset in the scope with
p >= span_tau (prev + 1 if none), kept over the last `window` forwards. A window whose population
standard deviation is < span_std settles the span at the last estimate; otherwise the span is the
window's mean (int), settled only at the last explore forward (or, if the window never filled, the
mean of what it holds). Fast (fill): the region [prev, span) is filled by the same rule, one
forward at a time, and only the first fill forward sees the whole canvas: later ones see the
canvas up to the region's end (`Plan.extent`; what follows is absent, not masked), which is where
the speed comes from. Then prev = span and the next sub-cycle starts. x0 is the argmax over the whole
vocabulary and p its softmax probability in the logits' dtype. The sub-cycle, span and window live
in `BlockState.memory`: one sample's block.

Departures: the reference's explore forwards on a block that is already full are not made (its
NFE counts them); a selected position whose x0 is the mask id commits its most probable other
token (the reference would leave it masked and loop forever in the uncapped fill).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Commit, Plan, Scheduler, top1
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class SlowFastParams(HyperParams):
    explore_steps: int = hp(6, 1, None, doc="forwards of each sub-cycle's slow phase (k_exploration_steps)",
                            search=(2, 8))
    span_tau: float = hp(0.3, 0.0, 1.0, doc="a prediction this confident extends the span estimate "
                         "(cycle_len_confidence_threshold)", search=(0.1, 0.5))
    window: int = hp(2, 1, None, doc="span estimates compared for stability (cycle_length_stability_window)",
                     search=(2, 4))
    span_std: float = hp(1.0, 0.0, None, doc="the span settles when its estimates' std is below this "
                         "(cycle_length_stability_std_dev_threshold)", search=(0.5, 2.0))
    fill_tau: float = hp(0.9, 0.0, 1.0, doc="commit every masked position this confident if more than one is, "
                         "else the most confident (high_confidence_threshold)", search=(0.5, 0.95))


def _fresh_cycle(memo: dict, prev: int) -> None:
    memo.update(prev=prev, phase="explore", explored=0, estimates=[], span=None, settled=False,
                cycle=memo.get("cycle", 0) + 1)


@register
class SlowFast(Scheduler):
    name = "slow_fast"
    display_order = 65
    Params = SlowFastParams
    shortens_canvas = True

    def step(self, state: BlockState) -> Plan:
        prm, memo = self.params, state.memory
        L = state.tokens.shape[0]
        if not memo:
            _fresh_cycle(memo, 0)
        x0 = state.logits.argmax(dim=-1)  # [L]
        p = torch.softmax(state.logits, dim=-1).gather(-1, x0[:, None]).squeeze(-1)  # [L], the logits' dtype
        conf = torch.where(state.masked, p, torch.full_like(p, float("-inf")))
        offsets = torch.arange(L, device=conf.device)
        prev, phase = memo["prev"], memo["phase"]
        info = {"sub_cycle": memo["cycle"], "stage": phase, "region_start": prev}
        if phase == "explore":
            if not memo["settled"]:
                sure = ((offsets >= prev) & (conf >= prm.span_tau)).nonzero()
                est = min(max(int(sure.max()) + 1 if sure.numel() else prev + 1, 1), L)
                memo["estimates"] = (memo["estimates"] + [est])[-prm.window:]
                if len(memo["estimates"]) == prm.window:
                    if statistics.pstdev(memo["estimates"]) < prm.span_std:
                        memo["span"], memo["settled"] = est, True
                    else:
                        memo["span"] = int(statistics.mean(memo["estimates"]))
                        memo["settled"] = memo["explored"] == prm.explore_steps - 1
            commit = self._fill(state, conf, x0, offsets >= prev)
            memo["explored"] += 1
            info["step"] = memo["explored"] - 1
            if memo["explored"] < prm.explore_steps:
                return Plan(commit, info=info)
            if memo["span"] is None:  # the window never filled
                memo["span"] = int(statistics.mean(memo["estimates"]))
            memo["phase"], memo["filled"] = "fill", 0
            info["region_end"] = memo["span"]
            self._close_if_full(state, commit, memo)
            return Plan(commit, info=info)  # the first fill forward sees the whole canvas
        span = memo["span"]
        region = (offsets >= prev) & (offsets < span)
        commit = self._fill(state, conf, x0, region)
        memo["filled"] += 1
        info.update(step=memo["filled"], region_end=span)
        if self._close_if_full(state, commit, memo):
            return Plan(commit, info=info)
        return Plan(commit, info=info, extent=span)  # later fill forwards end at the region

    @staticmethod
    def _close_if_full(state: BlockState, commit: Commit, memo: dict) -> bool:
        """After a commit that leaves the region [prev, span) without masks, the next sub-cycle starts."""
        left = state.masked.clone()
        left[commit.positions] = False
        if bool(left[memo["prev"]:memo["span"]].any()):
            return False
        _fresh_cycle(memo, memo["span"])
        return True

    def _fill(self, state: BlockState, conf: torch.Tensor, x0: torch.Tensor, scope: torch.Tensor) -> Commit:
        """In `scope`: every masked position with p >= fill_tau if more than one, else the most confident."""
        conf = torch.where(scope, conf, torch.full_like(conf, float("-inf")))
        sure = conf >= self.params.fill_tau
        if int(sure.sum()) > 1:
            pos = sure.nonzero().squeeze(-1)
        else:
            pos = torch.argmax(conf).reshape(1)
        tokens = x0[pos]
        if bool((tokens == state.mask_id).any()):  # never commit the mask id: the best other token instead
            tokens = torch.where(tokens == state.mask_id, top1(state)[0][pos], tokens)
        return Commit(pos, tokens)
