"""`eb_sampler`: Entropy-Bounded unmasking (EB-Sampler, Ben-Hamu et al., 2025).

Masked block positions are sorted by entropy ascending (stable: ties keep position order)
and the largest prefix of k >= 1 is committed whose summed entropy minus its largest entropy
stays within gamma. The bound limits the joint error of committing the k tokens
independently, so the number per step adapts to how certain the block is instead of being
fixed in advance. Entropy is over the full vocabulary in nats; tokens are greedy.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import BlockState, Commit, Plan, Scheduler, entropy, greedy
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class EBSamplerParams(HyperParams):
    # the RPS paper (appendix C) sweeps gamma over {0.1, 0.01, 0.001}; 0.1 is also the
    # common default of public EB-Sampler code
    gamma: float = hp(0.1, 0.0, None, doc="entropy budget: sum of the prefix's entropies minus their maximum",
                      search=(0.001, 1.0))


@register
class EBSampler(Scheduler):
    name = "eb_sampler"
    Params = EBSamplerParams

    def step(self, state: BlockState) -> Plan:
        tokens, _ = greedy(state)
        M = state.masked.nonzero().squeeze(-1)  # [|M|], ascending position
        h = entropy(state.probs[M])  # [|M|]
        order = torch.sort(h, stable=True).indices
        # sorted ascending, a prefix's maximum is its last entry, so sum - max is the sum of
        # the entries before it: an exclusive cumulative sum, exact and non-decreasing
        excess = torch.cat((h.new_zeros(1), torch.cumsum(h[order], 0)[:-1]))  # [|M|]
        k = int((excess <= self.params.gamma).sum())  # >= 1: the first excess is 0 and gamma >= 0
        pos = M[order[:k]]
        return Plan(Commit(pos, tokens[pos]), info={"k": k, "excess": float(excess[k - 1])})
