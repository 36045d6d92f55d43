"""`dus`: the dilated unmasking scheduler (DUS; omerlux/DUS abd7723, `generate.py`,
`generate_scheduled(scheduler='dilated', remasking='low_confidence')`).

A block's positions are unmasked in a fixed, dilated order planned before its first forward:
level 0 takes the offsets o with o % stride == 0 for stride = B // base, each next level halves
the stride (divides it by base) and takes the offsets not taken yet, so each level's positions are
spread across the block and far from each other; leftover offsets form a last level, which joins
the one before it when it is the shorter. One forward per level: every still-masked position of
the level takes x0 (the argmax of the raw logits over the whole vocabulary). Except at the last
level, a written token whose float64 probability is below `remask_tau` (strict) is taken back:
it belongs to no later level, so it stays masked. `steps` of the reference is ignored.

Departure (the reference leaves those masks in its output): a block whose last level leaves masks
ends with them (`Plan.defer`), so later blocks see them masked exactly as the reference's do, and
after the last block the engine gives it one more forward that fills each with its most probable
token other than the mask id (counted in NFE). A level position whose x0 is the mask id stays
masked the same way (the reference writes the mask id there).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Commit, Plan, Scheduler
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class DUSParams(HyperParams):
    base: int = hp(2, 2, None, doc="dilation base: each level divides the stride by base (2: halves it)",
                   search=(2, 4))
    remask_tau: float = hp(0.0, 0.0, 1.0, doc="take back a written token whose probability is < remask_tau "
                           "(0: never; the authors' confidence_threshold)", search=(0.0, 0.5))


def dilated_levels(block_length: int, base: int) -> list[list[int]]:
    """The block's offsets in DUS's levels: [[0, 16], [8, 24], ...] for 32 positions and base 2."""
    levels, taken, stride = [], set(), block_length // base
    while stride >= 1:
        level = [o for o in range(block_length) if o % stride == 0 and o not in taken]
        if level:
            levels.append(level)
            taken.update(level)
        stride //= base
    rest = [o for o in range(block_length) if o not in taken]
    if rest:
        levels.append(rest)
    if len(levels) > 1 and len(levels[-1]) < len(levels[-2]):
        levels[-2] = sorted(levels[-2] + levels.pop())
    return levels


@register
class DUS(Scheduler):
    name = "dus"
    display_order = 64
    Params = DUSParams
    defers_masks = True

    def step(self, state: BlockState) -> Plan:
        memo = state.memory
        if memo.get("window") != state.window:  # the block's schedule (each sub-block's), fixed at its
            # start; a level with no masked position (a block aligned to 0 holding the prompt's tail) gets no forward
            dev = state.tokens.device
            levels = [torch.tensor(lv, device=dev) for lv in dilated_levels(state.tokens.shape[0], self.params.base)]
            memo.update(window=state.window, level=0,
                        levels=[lv[state.masked[lv]] for lv in levels if bool(state.masked[lv].any())])
        levels, level = memo["levels"], memo["level"]
        memo["level"] += 1
        at = levels[level]  # positions of this level, all still masked
        x0 = state.logits[at].argmax(dim=-1)  # [k]
        keep = x0 != state.mask_id
        if level < len(levels) - 1:
            p = state.probs[at].gather(-1, x0[:, None]).squeeze(-1)  # [k] float64
            keep &= p >= self.params.remask_tau
        taken_back = [[state.response_offset + o, t] for o, t, k in zip(at.tolist(), x0.tolist(), keep.tolist())
                      if not k]  # [response position, token written and taken back], as the reference logs them
        last = level == len(levels) - 1  # what is still masked then stays so until the engine's fill
        return Plan(Commit(at[keep], x0[keep]), info={"level": level, "taken_back": taken_back}, defer=last)
