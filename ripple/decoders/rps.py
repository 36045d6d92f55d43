"""`rps`: Ripple-Pivot Search (Algorithm 1 of the RPS paper; DESIGN.md section 4).

Each step first commits by the standard confidence rule. Among the still-masked block
positions whose top-k_max tokens hold at least tau_pivot of the mass, the one with the
largest truncated entropy becomes the pivot; its plausible tokens (>= r times its top-1
probability) plus MASK are evaluated in one packed lookahead forward, and the candidate
with the lowest mean downstream entropy, regularised by lambda * log plausibility, wins.
The winner's distributions are carried into the next step, so no extra forward runs.

`carry` (issue 59) switches that carried step off for a measurement of what it costs: with
`carry=false` nothing is carried, and the engine runs a normal forward on the canvas (the pivot's
token written, or the MASK kept) before the next step, one more forward per lookahead that does
not end the block. Algorithm 1 is `carry=true`, the default.

`pivot` selects the pivot rule for the paper's ablation (its Figure 3, middle):
`truncated_entropy` is Algorithm 1; `max_entropy` drops the reachability filter (the
largest truncated entropy over every remaining masked position); `max_confidence` takes
the most confident remaining masked position (an already nearly resolved one).

Token editing (`edit_tau`, `max_post_steps`; ripple/decoders/editing.py; off by default) is
new, no published decoder combines it with a lookahead pivot: each step also rewrites decoded
tokens of the block by the shared edit rule, judged on the distributions the step reads, which
after a lookahead are the winning variant's (carried over, the block with the pivot's token in
place; with `carry=false` the fresh forward's); the variants are built from the block with the
step's commits and edits written.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Commit, Lookahead, Plan, Resolution, Scheduler, entropy
from .confidence import threshold_commit
from .editing import TokenEditing, edit_tau_hp, max_post_steps_hp
from .params import HyperParams, choice, flag, hp
from .registry import register


PIVOT_RULES = ("truncated_entropy", "max_entropy", "max_confidence")


@dataclass(frozen=True)
class PivotSearch:
    """What `resolve` needs from `step`: the pivot's block position (its candidates are the variants)."""

    pivot: int


@dataclass(frozen=True)
class RPSParams(HyperParams):
    tau: float = hp(0.9, 0.0, 1.0, doc="standard commit threshold")
    tau_pivot: float = hp(0.9, 0.0, 1.0, doc="minimum top-k_max mass for a pivot", search=(0.7, 0.99))
    k_max: int = hp(10, 1, 1000, doc="tokens kept per position for pivot entropy and candidates", search=(2, 20))
    r: float = hp(0.1, 0.0, 1.0, doc="candidate if probability >= r * top-1 probability", search=(0.01, 0.5))
    lam: float = hp(0.2, 0.0, 100.0, name="lambda", doc="plausibility weight", search=(0.0, 0.5))
    pivot: str = choice("truncated_entropy", PIVOT_RULES, doc="pivot rule (the paper's Figure 3 ablation)")
    carry: bool = flag(True, doc="the step after a lookahead reads the winner's distributions (Algorithm 1); "
                             "false: a fresh forward first", new=True)
    edit_tau: float = edit_tau_hp()
    max_post_steps: int = max_post_steps_hp()


@register
class RPS(TokenEditing, Scheduler):
    name = "rps"
    Params = RPSParams
    uses_lookahead = True
    display_order = 90

    def step(self, state: BlockState) -> Plan:
        prm = self.params
        edit = self.edits(state)
        if not bool(state.masked.any()):  # a post step (token editing): edits only
            return Plan(edit=edit)
        commit = threshold_commit(state, prm.tau)  # a. standard commit
        remaining = state.masked.clone()
        remaining[commit.positions] = False
        M = remaining.nonzero().squeeze(-1)  # [|M|]
        info = {"standard": len(commit)}
        if M.numel() == 0:
            return Plan(commit, edit=edit, info=info)
        if M.numel() < 2:  # b. nothing downstream to ripple into
            return Plan(commit, edit=edit, info={**info, "pivot": None, "why": "fewer than 2 masked"})
        probs = state.probs[M].clone()  # [|M|, V]
        probs[:, state.mask_id] = -1.0  # the mask id is never a candidate token
        k = min(prm.k_max, probs.shape[-1] - 1)
        top_p, top_v = probs.topk(k, dim=-1)  # [|M|, k], descending (c. truncated support)
        mu = top_p.sum(-1)  # [|M|]
        h_trunc = entropy(top_p)  # [|M|] entropy over the truncated support
        if prm.pivot == "truncated_entropy":
            feasible = mu >= prm.tau_pivot
            if not bool(feasible.any()):
                return Plan(commit, edit=edit, info={**info, "pivot": None, "why": "no position reaches tau_pivot"})
            j = int(torch.argmax(torch.where(feasible, h_trunc, torch.full_like(h_trunc, float("-inf")))))
        elif prm.pivot == "max_entropy":
            j = int(torch.argmax(h_trunc))
        else:  # max_confidence
            j = int(torch.argmax(top_p[:, 0]))
        # d. argmax takes the first maximum: lowest position on ties
        pivot = int(M[j])
        keep = top_p[j] >= prm.r * top_p[j, 0]  # e. reachability ratio
        cands = top_v[j][keep]  # [m], descending probability
        info.update(pivot=pivot, pivot_entropy=float(h_trunc[j]), pivot_mass=float(mu[j]))
        if cands.numel() <= 1:
            return Plan(commit, edit=edit, info={**info, "why": "one candidate"})
        block = state.tokens.clone()  # the block as the engine will hold it after this step
        block[commit.positions] = commit.tokens
        block[edit.positions] = edit.tokens
        variants = block[None].repeat(cands.numel(), 1)  # [m, L]
        variants[:, pivot] = cands
        info["candidates"] = cands.tolist()
        return Plan(commit, edit=edit, variants=variants, context=PivotSearch(pivot), info=info)

    def resolve(self, state: BlockState, plan: Plan, look: Lookahead) -> Resolution:
        pivot = plan.context.pivot
        cands = plan.variants[:, pivot]  # [m]
        downstream = state.masked.clone()  # the canvas already holds the standard commit
        downstream[pivot] = False
        anchor_p = torch.softmax(look.anchor.to(torch.float64), dim=-1)  # [L, V]
        var_p = torch.softmax(look.variants.to(torch.float64), dim=-1)  # [m, L, V]
        h_tok = entropy(var_p[:, downstream]).mean(-1)  # [m] mean downstream entropy per token branch
        h_mask = entropy(anchor_p[downstream]).mean()
        a_tok = anchor_p[pivot, cands]  # [m]
        a_mask = anchor_p[pivot].max()
        lam = self.params.lam
        scores = torch.cat((-h_tok + lam * torch.log(a_tok), (-h_mask + lam * torch.log(a_mask))[None]))  # [m + 1]
        best = int(torch.argmax(scores))  # ties: earliest candidate, MASK last
        table = [{"token": int(c), "entropy": float(h), "plausibility": float(a), "score": float(s)}
                 for c, h, a, s in zip(cands, h_tok, a_tok, scores)]
        table.append({"token": "MASK", "entropy": float(h_mask), "plausibility": float(a_mask), "score": float(scores[-1])})
        info = {"pivot": pivot, "candidates": table}
        carry = self.params.carry  # h. carry the winner's distributions, or none (the engine runs a forward)
        if best == cands.numel():
            return Resolution(Commit(), look.anchor if carry else None, {**info, "chosen": "MASK"})
        token = cands[best : best + 1]
        return Resolution(Commit(torch.tensor([pivot]), token), look.variants[best] if carry else None,
                          {**info, "chosen": int(token)})
