"""`klass`: KL-Adaptive Stability Sampling (KLASS, Kim et al., NeurIPS 2025).

A masked block position is ready when it is confident (top-1 probability > tau) and its
distribution has settled: the KL divergence KL(p_t || p_{t-1}) between its current and
previous-step distributions stayed below kappa at each of the last H steps. Every ready
position is committed at once (the reference's `unmask_strategy="all"`); when none is
ready, the single most confident position is (the reference's top-k fallback with one
token per step). Stability is what confidence alone misses: a confident prediction that
is still moving between steps is likely to change once its neighbours are decoded.

History is per sample and per block (`BlockState.memory`): the block-opening forward has
no predecessor, so the earliest multi-token commit is at step H.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import BlockState, Commit, Plan, Scheduler, greedy, top1_index
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class KlassParams(HyperParams):
    # defaults: the KLASS release's LLaDA settings (conf 0.9, KL 0.01, history 2); the RPS
    # paper (appendix C) uses tau 0.9 and sweeps kappa over {0.015, 0.01, 0.005, 0.001}
    tau: float = hp(0.9, 0.0, 1.0, doc="ready only if top-1 probability > tau")
    kappa: float = hp(0.01, 0.0, None, doc="ready only if KL to the previous step < kappa at each of the last H steps",
                      search=(0.001, 0.015))
    history: int = hp(2, 1, 64, name="H", doc="steps of KL history that must stay below kappa")


@register
class Klass(Scheduler):
    name = "klass"
    Params = KlassParams

    def step(self, state: BlockState) -> Plan:
        prm = self.params
        logp = torch.log_softmax(state.logits.to(torch.float64), dim=-1)  # [L, V]
        history: list[torch.Tensor] = state.memory.setdefault("kl", [])
        prev = state.memory.get("logp")
        if prev is not None:
            p = state.probs  # [L, V]
            history.append(torch.where(p > 0, p * (logp - prev), 0.0).sum(-1))  # KL(p_t || p_{t-1}): [L]
            del history[:-prm.history]
        state.memory["logp"] = logp
        tokens, conf = greedy(state)  # conf is -inf where decoded
        if len(history) == prm.history:
            stable = (torch.stack(history) < prm.kappa).all(0)  # [L]
        else:
            stable = torch.zeros_like(state.masked)
        ready = state.masked & stable & (conf > prm.tau)
        info = {"ready": int(ready.sum())}
        if not bool(ready.any()):
            i = top1_index(conf)
            return Plan(Commit(torch.tensor([i]), tokens[i : i + 1]), info={**info, "fallback": True})
        pos = ready.nonzero().squeeze(-1)
        return Plan(Commit(pos, tokens[pos]), info={**info, "fallback": False})
