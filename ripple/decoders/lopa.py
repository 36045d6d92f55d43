"""`lopa`: Lookahead Parallel Decoding (LoPA, Xu et al., 2025), reimplemented on this engine
as the RPS paper did (its core algorithm without the LoPA-Dist system; RPS paper appendix C).

Each step first applies the standard confidence commit (the anchor branch B0). Then each of
the `branches` most confident still-masked positions spawns a branch that additionally
commits its greedy token there. Anchor and branches are evaluated in one packed lookahead
forward, and decoding continues from the branch with the highest branch confidence: the
mean top-1 probability over its still-masked positions under its own new distributions.
The aim is a token filling order that leaves the rest of the block most confident, so more
positions clear tau in the next step. The anchor competes (the reference's default
`base_branch_competition`), listed first so ties keep it; a winning branch's extra token is
committed and its distributions are carried into the next step without another forward.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Commit, Lookahead, Plan, Resolution, Scheduler, greedy, top_prob
from .confidence import threshold_commit
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class LopaParams(HyperParams):
    tau: float = hp(0.9, 0.0, 1.0, doc="anchor commit threshold (Fast-dLLM rule)")
    # default: the reference code's branching_factor=2
    branches: int = hp(2, 1, 64, doc="lookahead branches, one per next most confident masked position", search=(1, 8))


@register
class Lopa(Scheduler):
    name = "lopa"
    Params = LopaParams
    uses_lookahead = True
    display_order = 80

    def step(self, state: BlockState) -> Plan:
        commit = threshold_commit(state, self.params.tau)  # the anchor branch's update
        remaining = state.masked.clone()
        remaining[commit.positions] = False
        n_left = int(remaining.sum())
        info = {"standard": len(commit)}
        if n_left < 2:  # a branch would leave no masked position to score
            return Plan(commit, info={**info, "branches": []})
        tokens, conf = greedy(state)
        conf = torch.where(remaining, conf, torch.full_like(conf, float("-inf")))
        where = torch.sort(conf, descending=True, stable=True).indices[: min(self.params.branches, n_left)]  # [k]
        block = state.tokens.clone()
        block[commit.positions] = commit.tokens
        variants = block[None].repeat(where.numel(), 1)  # [k, L]
        variants[torch.arange(where.numel()), where] = tokens[where]
        return Plan(commit, variants=variants, context=where, info={**info, "branches": where.tolist()})

    def resolve(self, state: BlockState, plan: Plan, look: Lookahead) -> Resolution:
        where = plan.context  # [k] block positions of the branches' extra commits
        k = where.numel()
        still = state.masked[None].repeat(k + 1, 1)  # [k + 1, L]; the canvas holds the anchor commit
        still[torch.arange(1, k + 1), where] = False
        logits = torch.cat((look.anchor[None], look.variants))  # [k + 1, L, V], anchor first
        conf = top_prob(torch.softmax(logits.to(torch.float64), dim=-1), state.mask_id)  # [k + 1, L]
        scores = torch.where(still, conf, 0.0).sum(-1) / still.sum(-1)  # [k + 1] mean over still-masked
        best = int(torch.argmax(scores))  # ties: the earlier candidate, the anchor first
        info = {"scores": [float(s) for s in scores], "chosen": "anchor" if best == 0 else int(where[best - 1])}
        if best == 0:
            return Resolution(Commit(), look.anchor, info)
        pos = where[best - 1 : best]
        return Resolution(Commit(pos, plan.variants[best - 1, pos]), look.variants[best - 1], info)
