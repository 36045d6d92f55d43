"""`klass`: KL-Adaptive Stability Sampling (KLASS, Kim et al., NeurIPS 2025).

A masked block position is ready when it is confident (top-1 probability > tau) and its
distribution has settled: the KL divergence KL(p_t || p_{t-1}) between its current and
previous-step distributions stayed below kappa at each of the last H steps. Every ready
position is committed at once; when none is ready, the single most confident position is.
Stability is what confidence alone misses: a confident prediction that is still moving
between steps is likely to change once its neighbours are decoded.

Rule followed: shkim0116/KLASS@ad87ecb, src/model/llada_klass.py, `stable_confident_decode`
with `alg="klass"`, `unmask_strategy="all"` and steps = gen_length (as its scripts run it),
so the fallback commits one token per step. As there, the previous distribution is never
reset at a block boundary: the official loop computes every position's distribution in every
forward, so at a block's first step p_{t-1} is the previous block's last forward. This
decoder therefore declares `needs_rows_beyond_block`, and the engine computes the next
block's rows in each of its forwards (other decoders do not pay for them). The check starts
at the block's step H - 1 (the reference's `step >= kl_history_length - 1`), so the H KLs it
reads are this block's, the first of them measured against the previous block's last
forward. Departures: the first forward of a sample has no predecessor and counts as
unstable (the reference compares it with an all-zero distribution, a KL of about 27.6 nats
minus the entropy, so the two differ only for kappa that large); for Dream (no official
block loop here), "previous" is the previous decoder step, so the block-opening forward
whose top-1 the engine commits is not part of the chain; the mask id is never committed
(the reference's argmax includes it).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Commit, Plan, Scheduler, greedy, top1_index
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class KlassParams(HyperParams):
    # defaults: the KLASS release's LLaDA settings (conf 0.9, KL 0.01, history 2); its scripts use
    # per-task values (paper-table1 sets them per task); the RPS paper (appendix C) sweeps kappa
    tau: float = hp(0.9, 0.0, 1.0, doc="ready only if top-1 probability > tau")
    kappa: float = hp(0.01, 0.0, None, doc="ready only if KL to the previous step < kappa at each of the last H steps",
                      search=(0.001, 0.015))
    history: int = hp(2, 1, 64, name="H", doc="steps of KL history that must stay below kappa")


def _kl(p: torch.Tensor, logp: torch.Tensor, prev: torch.Tensor | None) -> torch.Tensor:
    """KL(p || prev) per row from [L, V] probabilities, their logs and the previous logs -> [L];
    +inf without a predecessor."""
    if prev is None:
        return torch.full(p.shape[:-1], float("inf"), dtype=p.dtype, device=p.device)
    return torch.where(p > 0, p * (logp - prev), 0.0).sum(-1)


@register
class Klass(Scheduler):
    name = "klass"
    display_order = 20
    Params = KlassParams
    needs_rows_beyond_block = True

    def step(self, state: BlockState) -> Plan:
        prm = self.params
        logp = torch.log_softmax(state.logits.to(torch.float64), dim=-1)  # [L, V]
        carry = state.sample_memory
        if state.step == 0:  # this block's rows in the previous block's last forward (None at the start)
            prev, history = carry.pop("next_logp", None), state.memory.setdefault("kl", [])
        else:
            prev, history = state.memory["logp"], state.memory["kl"]
        history.append(_kl(state.probs, logp, prev))  # [L]
        del history[:-prm.history]
        state.memory["logp"] = logp
        if state.beyond is not None:
            carry["next_logp"] = torch.log_softmax(state.beyond.to(torch.float64), dim=-1)  # [L, V]
        tokens, conf = greedy(state)  # conf is -inf where decoded
        if len(history) == prm.history:  # step >= H - 1
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
