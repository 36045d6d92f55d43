"""`hierarchy`: dInfer's Hierarchy decoder (`HierarchyDecoder`, inclusionAI/dInfer fce4e32).

The block's masked positions split into runs of consecutive masked positions (a committed token or
the prompt's tail ends a run). Each run keeps its most confident position(s) (p equal to the run's
maximum, exact ties all) when p > low_tau; every masked position with p > tau joins; and the block's
single most confident masked position always commits (first index on ties), so each forward commits
at least one token. p is exp(log_softmax) at x0 in float32, x0 the argmax over the whole vocabulary;
no mask-id exclusion. The authors' `threshold=None` is tau = 1.0 (nothing is > 1) and
`low_threshold=None` is low_tau = 0.0 (every run's maximum is kept).

Departure: a selected position whose x0 is the mask id stays masked in dInfer (it writes the mask
id); Ripple leaves it out, and if nothing else is selected commits the most confident other token
(`greedy`), so no mask id is committed and a block always ends.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Plan, Scheduler
from .dinfer_threshold import commit_or_greedy
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class HierarchyParams(HyperParams):
    tau: float = hp(1.0, 0.0, 1.0, doc="every masked position with p > tau commits (1.0: none, the authors' None)",
                    search=(0.3, 1.0))
    low_tau: float = hp(0.0, 0.0, 1.0, doc="a run's most confident position commits when p > low_tau "
                        "(0.0: always, the authors' None)", search=(0.0, 0.5))


@register
class Hierarchy(Scheduler):
    name = "hierarchy"
    display_order = 61
    Params = HierarchyParams

    def step(self, state: BlockState) -> Plan:
        logits, masked = state.logits, state.masked
        x0 = logits.argmax(dim=-1)  # [L]
        p = torch.log_softmax(logits.float(), dim=-1).gather(-1, x0[:, None]).squeeze(-1).exp()  # [L] float32
        conf = torch.where(masked, p, torch.full_like(p, float("-inf")))
        chosen = masked & (conf > self.params.tau)
        # runs of consecutive masked positions: a run id per position, bumped after every unmasked one
        run = torch.cumsum((~masked).long(), 0)  # [L]
        for r in run[masked].unique().tolist():
            members = masked & (run == r)
            top = conf[members].max()
            chosen |= members & (conf == top) & (conf > self.params.low_tau)
        chosen[int(torch.argmax(conf))] = True
        chosen &= x0 != state.mask_id
        return Plan(commit_or_greedy(state, chosen, x0))
