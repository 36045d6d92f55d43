"""`wino`: Wide-In, Narrow-Out revokable decoding (WINO, Hong et al., 2025).

Wide in: draft every masked block position whose top-1 probability exceeds a permissive
tau1 (at least the most confident one, at most min(max(0.7 * masked, 5), 20) of the most
confident, the official code's cap). Narrow out: every step's forward also evaluates the
block's shadow (see `ripple/platform/runtime/engine.py`): an all-mask copy of the block appended
with the block's position ids, in which the row predicting position j sees the whole
context except the token at j. Its probability of j's current token is j's verification;
tokens decoded before this step whose verification is < tau2 are set back to the mask id,
so early mistakes made under the loose tau1 can be revoked once more context exists.

Rule followed: Feng-Hong/WINO-DLLM@9549a1d, LLaDA/decoding.py, `decoding_wino`. A step that
drafts more than one token remasks min(failed, last step's drafted count - 1) tokens, lowest
verification first (ties toward the lower position); a step that drafts one remasks none, and
a block's first step has nothing to verify. No further cap: the rule terminates by itself,
since each step remasks fewer than the previous step drafted, so after t steps of a block at
least t tokens are net committed (the sum telescopes) and a block takes at most block_length
steps, though a single step may net-remask. Departures: the mask id is never drafted (the
reference's argmax includes it); for Dream, the position the engine commits at the block
opening has no shadow row and is never verified.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Commit, Plan, Scheduler, greedy, no_positions
from .params import HyperParams, hp
from .registry import register

DRAFT_SHARE, DRAFT_MIN, DRAFT_MAX = 0.7, 5, 20  # per-step draft cap of the official code


@dataclass(frozen=True)
class WinoParams(HyperParams):
    # defaults: the official code's threshold=0.6, threshold_back=0.9; the RPS paper
    # (appendix C) sweeps tau1 over {0.5, 0.6, 0.7, 0.8} with tau2 fixed at 0.9
    tau1: float = hp(0.6, 0.0, 1.0, doc="wide in: draft masked positions with top-1 probability > tau1",
                     search=(0.5, 0.8))
    tau2: float = hp(0.9, 0.0, 1.0, doc="narrow out: remask decoded tokens whose verification probability < tau2")


@register
class Wino(Scheduler):
    name = "wino"
    display_order = 40
    Params = WinoParams
    uses_shadow = True

    def step(self, state: BlockState) -> Plan:
        tokens, conf = greedy(state)  # conf is -inf where decoded
        n_masked = int(state.masked.sum())
        cap = min(max(int(n_masked * DRAFT_SHARE), DRAFT_MIN), DRAFT_MAX)
        n = min(max(int((conf > self.params.tau1).sum()), 1), cap)
        draft = torch.sort(conf, descending=True, stable=True).indices[:n]  # ties: lower position first
        remask, info = self._narrow_out(state, n)
        state.memory["last_draft"] = n
        return Plan(Commit(draft, tokens[draft]), remask=remask, shadow=True, info={"drafted": n, **info})

    def _narrow_out(self, state: BlockState, n_draft: int) -> tuple[torch.Tensor, dict]:
        """Positions to remask: decoded ones verified below tau2, none if this step drafts one token,
        else at most the previous step's drafted count minus one."""
        probs = state.shadow_probs  # [L, V], the block as it stands now; None at the block's start
        if probs is None:
            return no_positions(), {}
        decoded = state.decoded
        verify = probs.gather(-1, state.tokens[:, None]).squeeze(-1)  # [L]
        failed = (decoded & (verify < self.params.tau2)).nonzero().squeeze(-1)  # ascending position
        limit = state.memory["last_draft"] - 1 if n_draft > 1 else 0
        worst = torch.sort(verify[failed], stable=True).indices[:limit]  # lowest first, ties: lower position
        info = {"verified": int(decoded.sum()), "failed": int(failed.numel())}
        return failed[worst], info
