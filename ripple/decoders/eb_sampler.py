"""`eb_sampler`: Entropy-Bounded unmasking (EB-Sampler, Ben-Hamu et al., 2025).

Masked block positions are put in an order, and the largest prefix of k >= 1 of them is
committed whose summed entropy minus its largest entropy stays within gamma. The bound
limits the joint error of committing the k tokens independently, so the number per step
adapts to how certain the block is instead of being fixed in advance. Entropy is over the
full vocabulary in nats; tokens are greedy; sorts are stable (ties keep position order).

Its authors released no code. `order=entropy` (default) follows NEUIR/PC-Sampler@8b106b0,
src/generate.py, `generate_with_eb_sampler`: entropy ascending, run inside the
semi-autoregressive block loop (the reference decodes the whole response at once).
`order=confidence` is the variant of Kamichanw/d2Cache (its `eb_sampler` generation
strategy): top-1 probability descending. In that order a prefix's largest entropy need not
be its last entry, so the maximum is the running (cumulative) maximum along the sorted
prefix; d2Cache takes it over the wrong dimension, which is the one departure here.
sum - max never decreases along a prefix (each new entry adds itself or the old maximum),
so "largest prefix within gamma" is a count in both orders. The mask id is never committed.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Commit, Plan, Scheduler, entropy, greedy
from .params import HyperParams, choice, hp
from .registry import register

ORDERS = ("entropy", "confidence")


@dataclass(frozen=True)
class EBSamplerParams(HyperParams):
    # the RPS paper (appendix C) sweeps gamma over {0.1, 0.01, 0.001}; 0.1 is also the
    # common default of public EB-Sampler code
    gamma: float = hp(0.1, 0.0, None, doc="entropy budget: sum of the prefix's entropies minus their maximum",
                      search=(0.001, 1.0))
    order: str = choice("entropy", ORDERS, doc="sort masked positions by entropy ascending (PC-Sampler) "
                                               "or by confidence descending (d2Cache)")


@register
class EBSampler(Scheduler):
    name = "eb_sampler"
    display_order = 30
    Params = EBSamplerParams

    def step(self, state: BlockState) -> Plan:
        tokens, conf = greedy(state)  # conf is -inf where decoded
        M = state.masked.nonzero().squeeze(-1)  # [|M|], ascending position
        h = entropy(state.probs[M])  # [|M|]
        key = h if self.params.order == "entropy" else -conf[M]
        order = torch.sort(key, stable=True).indices
        hs = h[order]  # [|M|] entropies in commit order
        excess = torch.cumsum(hs, 0) - torch.cummax(hs, 0).values  # [|M|] sum - max of each prefix
        k = max(int((excess <= self.params.gamma).sum()), 1)  # the first excess is 0 and gamma >= 0
        pos = M[order[:k]]
        return Plan(Commit(pos, tokens[pos]), info={"k": k, "excess": float(excess[k - 1])})
