"""Token editing (LLaDA2.1's Token-to-Token rule), shared by every decoder that edits.

A decoder gains editing by mixing in `TokenEditing` and declaring `edit_tau` and
`max_post_steps` in its hyperparameters (`edit_tau_hp`, `max_post_steps_hp`): its plans then
carry `edit_rule`'s rewrites, read from the same distributions as the step's commits, and the
engine runs post forwards after the block's last mask is filled while post steps still edit
(ripple/platform/runtime/engine.py). At the defaults (edit_tau 1.0, max_post_steps 0) nothing
changes: no probability exceeds 1 and no post forward runs.
"""
from __future__ import annotations

from typing import ClassVar

from .base import BlockState, Commit, top1
from .params import hp


def edit_tau_hp():
    return hp(1.0, 0.0, 1.0, doc="rewrite a decoded token when the top-1 token differs with probability > edit_tau "
              "(1.0: never)", new=True)


def max_post_steps_hp():
    return hp(0, 0, None, doc="post forwards per block after its last mask is filled, while they still edit",
              new=True)


def edit_rule(state: BlockState, edit_tau: float) -> Commit:
    """Every decoded, non-fixed block position whose top-1 token (never the mask id) differs from its
    token with probability > edit_tau (strict) gets that token. Read from the distributions the
    step's commits read, before those are written, so a position committed in this step is not
    edited in it."""
    tokens, p = top1(state)  # [L], [L] float64
    hit = state.decoded & (tokens != state.tokens) & (p > edit_tau)  # [L]
    pos = hit.nonzero().squeeze(-1)
    return Commit(pos, tokens[pos])


class TokenEditing:
    """Mixin for a Scheduler whose Params have `edit_tau` and `max_post_steps`."""

    edits_tokens: ClassVar[bool] = True

    @property
    def may_edit(self) -> bool:
        return self.params.edit_tau < 1.0

    @property
    def max_post_forwards(self) -> int:
        return self.params.max_post_steps

    def edits(self, state: BlockState) -> Commit:
        """This step's edits (none when editing is off)."""
        return edit_rule(state, self.params.edit_tau) if self.may_edit else Commit()
