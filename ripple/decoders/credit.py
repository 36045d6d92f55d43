"""`credit`: dInfer's CreditDecoding (`CreditThresholdParallelDecoder`, inclusionAI/dInfer fce4e32).

A masked position that keeps predicting the same token earns credit for it: each decision of a
block first decays the block's credit matrix [L, V] by beta (not at its first decision), adds
p1 ** gamma at each masked position's raw top-1 token (p1 its float32 softmax probability, the
mask id included), and then runs dInfer's Threshold rule on the fused logits
logits + alpha * log(credit + 1). The matrix belongs to one sample's block (`BlockState.memory`):
dInfer keeps it on the decoder object keyed by the block's (start, end) and clears all matrices only
when no mask is left in the whole array, so a reused decoder object carries stale credit into the
next prompt after an end-of-sequence stop; Ripple's state never leaves its sample.

dInfer also decodes on wasted forwards (a finished block's iterations), which decay and feed only
that finished block's matrix; Ripple makes no such forwards, and the matrices used are the same.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Plan, Scheduler
from .dinfer_threshold import commit_or_greedy, threshold_rule
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class CreditParams(HyperParams):
    tau: float = hp(0.9, 0.0, 1.0, doc="dInfer's threshold, applied to the credit-fused logits", search=(0.3, 0.95))
    alpha: float = hp(0.7, 0.0, None, doc="weight of log(credit + 1) added to the logits (credit_alpha)",
                      search=(0.1, 2.0))
    gamma: float = hp(0.2, 0.0, None, lo_open=True, doc="credit earned per decision: p1 ** gamma (boost_gamma)",
                      search=(0.1, 1.0))
    beta: float = hp(0.8, 0.0, 1.0, doc="decay of the credit at each later decision of a block (decay_beta)",
                     search=(0.3, 1.0))


@register
class Credit(Scheduler):
    name = "credit"
    display_order = 62
    Params = CreditParams

    def step(self, state: BlockState) -> Plan:
        prm = self.params
        logits = state.logits.float()  # [L, V]
        credit = state.memory.get("credit")
        if credit is None:
            credit = torch.zeros_like(logits)  # [L, V] float32
        else:
            credit = credit * prm.beta
        p1, i1 = torch.softmax(logits, dim=-1).max(dim=-1)  # [L], [L]
        at = state.masked.nonzero().squeeze(-1)
        credit[at, i1[at]] += p1[at] ** prm.gamma
        state.memory["credit"] = credit
        fused = logits + prm.alpha * torch.log(credit + 1)  # [L, V]
        chosen = threshold_rule(fused, state.masked, state.mask_id, prm.tau)
        return Plan(commit_or_greedy(state, chosen, fused.argmax(dim=-1)))
