"""`dinfer_threshold`: dInfer's Threshold parallel decoder (inclusionAI/dInfer, the official engine
of LLaDA2.x: `ThresholdParallelDecoder`, `python/dinfer/decoding/parallel_strategy.py` at fce4e32).

Not `confidence`: the probabilities are float32 (dInfer's default `use_float64=False`), x0 is the
argmax over the whole vocabulary, and a masked position whose x0 is the mask id is no candidate
(it neither commits nor counts towards the maximum). The bar is T = min(max(max_conf - 1e-5,
-1000), tau) in float32 and every candidate with p >= T commits (inclusive): all candidates at or
above tau when the best clears tau by 1e-5, else the best plus any within 1e-5 of it.

Departure: where every masked position's x0 is the mask id, dInfer commits nothing and repeats the
same forward forever; Ripple commits the most confident other token at the most confident
position (`greedy`), so a block always ends and no mask id is committed.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Commit, Plan, Scheduler, argmax_probs, most_confident
from .params import HyperParams, hp
from .registry import register

NEAR_BEST = 1e-5  # dInfer keeps every candidate this close to the best


@dataclass(frozen=True)
class DInferThresholdParams(HyperParams):
    tau: float = hp(0.9, 0.0, 1.0, doc="dInfer's threshold: commit candidates with float32 p >= tau (the best, "
                    "and any within 1e-5 of it, when none clears it)", search=(0.3, 0.95))


def threshold_rule(logits: torch.Tensor, masked: torch.Tensor, mask_id: int, tau: float) -> torch.Tensor:
    """dInfer's `get_transfer_index_threshold` on one block: [L, V] logits, [L] masked -> [L] bool commits
    (x0 is `logits.argmax`). Shared with CreditDecoding, which runs it on its fused logits."""
    x0, p = argmax_probs(logits)  # [L], float32 [L]
    cand = masked & (x0 != mask_id)
    if not bool(cand.any()):
        return cand
    conf = torch.where(cand, p, torch.full_like(p, float("-inf")))  # float32
    best = conf.max()
    bar = torch.clamp(torch.clamp(best - NEAR_BEST, min=-1000.0), max=tau)  # float32, as dInfer
    return cand & (conf >= bar)


def commit_or_greedy(state: BlockState, chosen: torch.Tensor, x0: torch.Tensor) -> Commit:
    """The chosen positions' x0, or (none chosen) the most confident non-mask token: a block always ends."""
    if not bool(chosen.any()):
        return most_confident(state)
    pos = chosen.nonzero().squeeze(-1)
    return Commit(pos, x0[pos])


@register
class DInferThreshold(Scheduler):
    name = "dinfer_threshold"
    display_order = 60
    Params = DInferThresholdParams

    def step(self, state: BlockState) -> Plan:
        chosen = threshold_rule(state.logits, state.masked, state.mask_id, self.params.tau)
        return Plan(commit_or_greedy(state, chosen, state.logits.argmax(dim=-1)))
