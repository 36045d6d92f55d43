"""`sequential`: left to right inside the block, the within-block autoregressive baseline.

Each step commits the leftmost masked positions of the block with their top-1 tokens, as many
as the schedule gives: with `steps` = S > 0, block_length // S, plus one for the first
block_length mod S steps (the schedule of `confidence` with `steps`), at least one and at most
what is left; with S = 0, one per step. This is the `sequential` remasking strategy of SDAR's
`block_diffusion_generate` (JetAstra/SDAR@c2041a8, generate.py): positions first_mask ..
first_mask + k_s - 1. Confidence plays no part in where to commit, so the decoder measures
what parallel decoding buys over filling each block in order. The mask id is never committed.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import BlockState, Commit, Plan, Scheduler, greedy, step_quota
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class SequentialParams(HyperParams):
    steps: int = hp(0, 0, None, doc="> 0: block_length // steps leftmost commits per step (+1 for the first "
                    "block_length % steps steps); 0: one per step")


@register
class Sequential(Scheduler):
    name = "sequential"
    display_order = 15
    Params = SequentialParams

    def step(self, state: BlockState) -> Plan:
        tokens, _ = greedy(state)  # [L]
        pos = state.masked.nonzero().squeeze(-1)[:step_quota(state, self.params.steps)]  # leftmost masked
        return Plan(Commit(pos, tokens[pos]))
