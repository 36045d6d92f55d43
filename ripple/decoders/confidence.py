"""`confidence`: Fast-dLLM parallel decoding. Threshold rule: the most confident masked
position plus every other with top-1 probability >= tau. Factor rule (when `factor` > 0):
the largest n whose sorted confidences satisfy c_k >= 1 - factor / (k + 1) for k = 1..n.

`steps` = S > 0 is LLaDA2's rule (inclusionAI's `generate`, threshold decoding with a
per-step minimum): step s of a block must commit at least k_s = block_length // S tokens,
plus one for the first block_length mod S steps (block_length in all over S steps); if at
least k_s masked positions have top-1 probability > tau (strict, as there) all of them
commit, else the k_s most confident do (ties: lower position). With S = block_length every
k_s is 1 and the rule is the threshold rule. The reference's `generate(steps, threshold,
minimal_topk)` is steps = min(steps, gen_length // minimal_topk), tau = threshold.

`k` = K > 1 is LLaDA2.1's fill rule (`num_to_transfer`): every masked position with top-1
probability > tau (strict) commits if there are at least K of them, else the K most confident.
With `edit_tau` and `max_post_steps` (ripple/decoders/editing.py) the decoder is LLaDA2.1's
`generate(threshold=tau, editing_threshold=edit_tau, max_post_steps, num_to_transfer=k)`
(inclusionAI's LLaDA2.1-mini modeling file; ../shared/golden/README.md): each step also
rewrites decoded tokens of the block whose top-1 token now differs with probability > edit_tau,
and a full block keeps running post forwards while they edit.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from ..errors import RippleError
from .base import BlockState, Commit, Plan, Scheduler, greedy, step_quota, top1_index
from .editing import TokenEditing, edit_tau_hp, max_post_steps_hp
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class ConfidenceParams(HyperParams):
    tau: float = hp(0.9, 0.0, 1.0, doc="commit every masked position with top-1 probability >= tau")
    factor: float = hp(0.0, 0.0, None, doc="> 0 switches to Fast-dLLM's factor rule with this factor")
    steps: int = hp(0, 0, None, doc="> 0: LLaDA2's per-step minimum, block_length // steps commits per step "
                    "(+1 for the first block_length % steps steps)", new=True)
    k: int = hp(1, 1, None, doc="minimum commits per fill step: all above tau (strict) if at least k, else the k "
                "most confident (LLaDA2.1's num_to_transfer)", new=True)
    edit_tau: float = edit_tau_hp()
    max_post_steps: int = max_post_steps_hp()

    def __post_init__(self):
        super().__post_init__()
        rules = [f"{name}={getattr(self, name)}" for name, off in (("factor", 0.0), ("steps", 0), ("k", 1))
                 if getattr(self, name) != off]
        if len(rules) > 1:
            raise RippleError(f"confidence hyperparameters {' and '.join(rules)} are different rules; accepted: at "
                              "most one of factor > 0, steps > 0, k > 1")


def threshold_commit(state: BlockState, tau: float) -> Commit:
    """Shared with RPS's standard commit: top-1 always, plus all with confidence >= tau."""
    tokens, conf = greedy(state)
    chosen = conf >= tau
    chosen[top1_index(conf)] = True
    pos = chosen.nonzero().squeeze(-1)
    return Commit(pos, tokens[pos])


@register
class Confidence(TokenEditing, Scheduler):
    name = "confidence"
    display_order = 10
    Params = ConfidenceParams

    def step(self, state: BlockState) -> Plan:
        edit = self.edits(state)
        if not bool(state.masked.any()):  # a post step (token editing): edits only
            return Plan(edit=edit)
        return Plan(self._commit(state), edit=edit)

    def _commit(self, state: BlockState) -> Commit:
        if self.params.factor > 0:
            return self._factor(state)
        if self.params.steps > 0:
            return self._at_least(state, step_quota(state, self.params.steps))
        if self.params.k > 1:
            return self._at_least(state, self.params.k)
        return threshold_commit(state, self.params.tau)

    def _at_least(self, state: BlockState, k: int) -> Commit:
        """All masked positions above tau (strict) if at least k are, else the k most confident."""
        tokens, conf = greedy(state)  # conf -inf where decoded
        n_masked = int(state.masked.sum())
        k = max(1, min(k, n_masked))
        sure = (conf > self.params.tau).nonzero().squeeze(-1)
        if sure.numel() >= k:
            return Commit(sure, tokens[sure])
        pos = torch.sort(conf, descending=True, stable=True).indices[:k]
        return Commit(pos, tokens[pos])

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
