"""`oracle`: how few forwards this model needs to write a given completion (Learn2PD's "extremely
greedy" rule, arXiv 2509.25188; issue 51).

The oracle knows the answer: per sample, the reference completion that the decoder named by
`follow` (at its default settings) writes for the same prompt under the same run settings. The
engine runs that decoder first and hands each block state its reference tokens
(`BlockState.reference`; ripple/platform/runtime/reference.py); the decoder only declares
`follows_reference`. At every forward the oracle commits every masked position of the current block
(or sub-block) whose top-1 token already equals the reference token there; where none does, it
commits the reference token at the masked position that gives it the highest probability (the
leftmost on a tie). Every forward therefore commits at least one token and the output is the
reference, token for token.

What it is: a lower estimate of the forwards any decoder needs to reproduce that reference with this
model. What it is not: a bound for decoders that write something else (they may stop earlier on a
different answer), nor a decoder one could deploy (it reads the answer).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import RippleError
from ..lazy import torch
from .base import BlockState, Commit, Plan, Scheduler, most_confident, top1
from .params import HyperParams, text
from .registry import register


def refusal(name: str) -> str | None:
    """Why decoder `name` (a registered name) cannot be followed, or None when it can."""
    from .registry import get

    cls = get(name)
    if cls.follows_reference:
        return "follows a reference itself, so it has no completion of its own to follow"
    if cls.noise != "mask":
        return f"decodes {cls.noise}-noise families, which have no masked positions to commit"
    if cls.cuts_canvas:
        return "may end its response before gen_length (it cuts the canvas), so positions past its end have no reference"
    dec = cls()
    if dec.may_edit or dec.max_post_forwards > 0:
        return "rewrites tokens it committed (token editing), so its commits are no reference"
    return None


def followable() -> list[str]:
    """Registered decoders the oracle can follow, in display order."""
    from .registry import names

    return [n for n in names() if refusal(n) is None]


@dataclass(frozen=True)
class OracleParams(HyperParams):
    follow: str = text("default", doc="the registered decoder (at its default settings) whose completion is followed")

    def __post_init__(self):
        super().__post_init__()
        from .registry import get

        try:
            get(self.follow)
        except RippleError:
            raise RippleError(f"oracle hyperparameter follow={self.follow!r} is not a registered decoder; "
                              f"accepted: {', '.join(followable())}") from None
        why = refusal(self.follow)
        if why is not None:
            raise RippleError(f"oracle hyperparameter follow={self.follow!r} cannot be followed: it {why}; "
                              f"accepted: {', '.join(followable())}")


@register
class Oracle(Scheduler):
    name = "oracle"
    display_order = 88  # after the decoders it measures, before rps (listed last)
    Params = OracleParams
    follows_reference = True

    def reference_decoder(self) -> Scheduler:
        from .registry import build

        return build(self.params.follow)

    def step(self, state: BlockState) -> Plan:
        ref = state.reference  # [L] reference token per block position (-1: none)
        if ref is None:
            raise RuntimeError("oracle: the engine handed no reference tokens (a decoder that follows a reference)")
        tokens, _ = top1(state)  # [L] top-1 other than the mask id
        hit = state.masked & (tokens == ref)  # [L]
        if bool(hit.any()):
            pos = hit.nonzero().squeeze(-1)  # [k]
            return Plan(Commit(pos, ref[pos]))
        known = state.masked & (ref >= 0)  # [L]
        if not bool(known.any()):
            return Plan(most_confident(state))
        p = state.probs.gather(-1, ref.clamp(min=0)[:, None]).squeeze(-1)  # [L] probability of the reference
        p = torch.where(known, p, torch.full_like(p, -1.0))
        at = int(torch.argmax(p))  # the first maximum: leftmost on a tie
        return Plan(Commit(torch.tensor([at], device=ref.device), ref[at:at + 1]))
