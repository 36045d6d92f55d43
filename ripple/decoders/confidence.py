"""`confidence`: Fast-dLLM parallel decoding. Threshold rule: the most confident masked
position plus every other with top-1 probability >= tau. Factor rule (when `factor` > 0):
the largest n whose sorted confidences satisfy c_k >= 1 - factor / (k + 1) for k = 1..n."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import BlockState, Commit, Plan, Scheduler, greedy, top1_index
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class ConfidenceParams(HyperParams):
    tau: float = hp(0.9, 0.0, 1.0, doc="commit every masked position with top-1 probability >= tau")
    factor: float = hp(0.0, 0.0, None, doc="> 0 switches to Fast-dLLM's factor rule with this factor")


def threshold_commit(state: BlockState, tau: float) -> Commit:
    """Shared with RPS's standard commit: top-1 always, plus all with confidence >= tau."""
    tokens, conf = greedy(state)
    chosen = conf >= tau
    chosen[top1_index(conf)] = True
    pos = chosen.nonzero().squeeze(-1)
    return Commit(pos, tokens[pos])


@register
class Confidence(Scheduler):
    name = "confidence"
    display_order = 10
    Params = ConfidenceParams

    def step(self, state: BlockState) -> Plan:
        if self.params.factor > 0:
            return Plan(self._factor(state))
        return Plan(threshold_commit(state, self.params.tau))

    def _factor(self, state: BlockState) -> Commit:
        tokens, conf = greedy(state)
        n_masked = int(state.masked.sum())
        # stable sort: equal confidences keep position order
        order = torch.sort(conf, descending=True, stable=True).indices[:n_masked]
        ks = torch.arange(1, n_masked + 1, dtype=torch.float64)
        ok = conf[order] >= 1.0 - self.params.factor / (ks + 1.0)
        ok[0] = True
        n = int(torch.cumprod(ok.to(torch.int64), 0).sum())
        pos = order[:n]
        return Commit(pos, tokens[pos])
