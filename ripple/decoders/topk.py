"""`topk`: ParallelBench's unmasking methods (furiosa-ai/ParallelBench, Kang et al., ICLR 2026), the
menu its paper sweeps, as one decoder. Rules and quirks: ../shared/golden/README.md, section
"ParallelBench's unmasking methods"; docs/decoders.md maps its method names to these settings.

`rank` orders a block's masked positions, higher first, from p = softmax of a position's logits in
the logits' dtype and x0 = its most probable token: `confidence` p[x0], `margin` top-1 minus top-2
probability, `entropy` sum p ln(p + 1e-10) (the negative entropy), `random` a uniform draw from the
sample's own generator (the draws ParallelBench makes after torch.manual_seed(seed)).
Rules: top-k by default, `k` tokens per forward (S = block_length / k forwards per block) or `steps`
forwards over the whole response (S = steps / blocks); `tau` > 0 the threshold rule (the best
position always, every other with score >= tau); `factor` > 0 the factor rule (the first rank
i >= 1 whose score is below 1 - factor / (i + 2) ends the commit, but the last rank is never tested).

ParallelBench runs each family through its own loop, and so does `topk`, by the family's logit
geometry (never its name): on an unshifted family (LLaDA) its `generate`: the mask id's logit is
-inf before the softmax, the block's m masks are spread over its S forwards as m // S each plus one
for the first m mod S, random draws one uniform per canvas position (prompt + response) per forward.
On a shifted family (Dream) its `sample_block`: no commit at the block opening (the decoder declares
`decides_first_position`), the mask id competes (a selected position whose x0 is the mask id stays
masked), forward i < S - 1 commits int(n * (1 - t[i+1] / t[i])) in float32 on the time grid
t = linspace(1, 0, S + 1) (n = the block's masks; it falls one short where float32 lands below an
integer, so a forward may commit nothing: `idle_steps`) and forward S - 1 the rest, random draws
one uniform per masked position of the block per forward.

Departures, where ParallelBench cannot go on: a Dream top-k block's last forward, a threshold or
factor forward that would commit nothing because every selected x0 is the mask id (ParallelBench
fails indexing its time grid, or loops forever on the same canvas), commits those positions' best
other token. Ripple makes no forward on a full block (ParallelBench's LLaDA loop does when a block's
masks run out before its S forwards, only possible with prompt tokens in a block: block-aligned
families). With a KV cache a shifted family keeps the engine's opening commit.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import RippleError
from .base import BlockState, Commit, Plan, RunShape, Scheduler, top1
from .params import HyperParams, choice, hp
from .registry import register

RANKS = ("confidence", "margin", "entropy", "random")
ENTROPY_EPS = 1e-10  # ParallelBench's floor inside the log


@dataclass(frozen=True)
class TopKParams(HyperParams):
    rank: str = choice("confidence", RANKS, doc="the score that orders a block's masked positions", search=RANKS)
    k: int = hp(1, 1, None, doc="top-k rule: tokens per forward, block_length / k forwards per block (a divisor "
                "of block_length)")
    steps: int = hp(0, 0, None, doc="top-k rule: forwards over the whole response, divided evenly among the "
                    "blocks (0: from k)")
    tau: float = hp(0.0, 0.0, 1.0, doc="> 0: threshold rule, the best position plus every other with score >= tau")
    factor: float = hp(0.0, 0.0, None, doc="> 0: factor rule, commit until rank i >= 1 scores below "
                       "1 - factor / (i + 2)")

    def __post_init__(self):
        super().__post_init__()
        if self.tau > 0 and self.factor > 0:
            raise RippleError(f"topk hyperparameters tau={self.tau} and factor={self.factor} are different rules; "
                              "accepted: at most one of tau > 0, factor > 0")
        if self.k > 1 and self.steps > 0:
            raise RippleError(f"topk hyperparameters k={self.k} and steps={self.steps} both set the top-k schedule; "
                              "accepted: one of k > 1, steps > 0")
        schedule = [f"{n}={getattr(self, n)}" for n, off in (("k", 1), ("steps", 0)) if getattr(self, n) != off]
        rule = [f"{n}={getattr(self, n)}" for n in ("tau", "factor") if getattr(self, n) > 0]
        if schedule and rule:
            raise RippleError(f"topk hyperparameter {schedule[0]} sets the top-k schedule, which the {rule[0]} rule "
                              "does not use; accepted: k and steps with the top-k rule only")


@register
class TopK(Scheduler):
    name = "topk"
    display_order = 66
    Params = TopKParams
    decides_first_position = True  # ParallelBench's Dream loop has no opening commit
    idle_steps = True  # a Dream quota may round down to 0
    response_steps_params = ("steps",)  # PBx groups `steps` by tokens per step (gen_length / steps)

    _shifted = False  # the run's family reads position i's prediction at i - 1 (`prepare`)
    _gen_length = 0

    @property
    def draws(self) -> bool:
        return self.params.rank == "random"

    def prepare(self, shape: RunShape) -> None:
        p, L = self.params, shape.block_length
        if p.steps:
            for n in sorted(set(shape.n_blocks)):
                if p.steps % n or not 1 <= p.steps // n <= L:
                    raise RippleError(f"topk steps={p.steps} must be a multiple of the number of blocks ({n}: "
                                      f"gen_length {shape.gen_length}, block_length {L}) with at most block_length "
                                      f"forwards per block; accepted: {', '.join(str(n * s) for s in range(1, L + 1))}")
        elif L % p.k:
            divisors = (d for d in range(1, L + 1) if L % d == 0)
            raise RippleError(f"topk k={p.k} must divide block_length {L}; accepted: {', '.join(map(str, divisors))}")
        # the run's configuration (every generate call sets it anew), not a sample's state
        self._shifted = shape.logit_shift > 0
        self._gen_length = shape.gen_length

    def step(self, state: BlockState) -> Plan:
        p = self.params
        masked = state.masked  # [L]
        n = int(masked.sum())
        x0, score = self._scores(state)  # [L], [L]
        score = torch.where(masked, score, torch.full_like(score, float("-inf")))
        order = torch.sort(score, descending=True, stable=True).indices[:n]  # masked positions, best first
        last = False  # the rule cannot go on with masks left (Dream's mask id: module docstring)
        if p.tau > 0:
            count = 1 + int((score[order[1:]] >= p.tau).sum())
            last = True
        elif p.factor > 0:
            count = self._factor_count(score[order])
            last = True
        else:
            count, last = self._quota(state, n)
        chosen = order[:count]
        tokens = x0[chosen]
        keep = tokens != state.mask_id  # Dream: a selected mask id stays masked
        if last and not bool(keep.any() if p.tau > 0 or p.factor > 0 else keep.all()):
            best, _ = top1(state)  # [L], never the mask id
            tokens = torch.where(keep, tokens, best[chosen])
            keep = torch.ones_like(keep)
        pos, tokens = chosen[keep], tokens[keep]
        at = torch.argsort(pos)  # written (and traced) in position order
        return Plan(Commit(pos[at], tokens[at]), info={"selected": int(count)})

    def _scores(self, state: BlockState) -> tuple[torch.Tensor, torch.Tensor]:
        """x0 [L] and the rank's score [L] (float32 or the logits' dtype), as ParallelBench's loop for the family."""
        logits = state.logits  # [L, V]
        if not self._shifted:  # its LLaDA forward: the mask id can never be x0 and has probability 0
            logits = logits.clone()
            logits[:, state.mask_id] = float("-inf")
        probs = torch.softmax(logits, dim=-1)  # [L, V] in the logits' dtype
        conf, x0 = probs.max(dim=-1)  # [L]
        rank = self.params.rank
        if rank == "confidence":
            return x0, conf
        if rank == "margin":
            top = probs.topk(2, dim=-1).values  # [L, 2]
            return x0, top[:, 0] - top[:, 1]
        if rank == "entropy":
            return x0, (probs * torch.log(probs + ENTROPY_EPS)).sum(dim=-1)
        return x0, self._draw(state)

    def _draw(self, state: BlockState) -> torch.Tensor:
        """One uniform per position [L] from the sample's generator, one call per forward as ParallelBench
        makes it: LLaDA one float32 (1, prompt + gen_length) draw over the sequence (position j's is its
        score), Dream one (n,) draw in the logits' dtype over the block's masked positions in position order."""
        L = state.tokens.shape[0]
        if self._shifted:
            at = state.masked.nonzero().squeeze(-1).cpu()
            score = torch.full((L,), float("-inf"), dtype=state.logits.dtype)
            score[at] = torch.rand((at.numel(),), generator=state.generator, dtype=state.logits.dtype)
        else:
            first = state.prompt_length + state.response_offset  # position id of block position 0
            size = max(state.prompt_length + self._gen_length, first + L)
            score = torch.rand((1, size), generator=state.generator)[0, first:first + L]
        return score.to(state.logits.device)

    def _quota(self, state: BlockState, n: int) -> tuple[int, bool]:
        """Top-k: this forward's commits and whether it is the block's last scheduled forward."""
        p, L = self.params, state.tokens.shape[0]
        S = p.steps // state.n_blocks if p.steps else L // p.k
        i = state.step
        if i >= S - 1:
            return n, True
        if self._shifted:  # sample_block: float32 time grid with eps = 0, truncated
            t = torch.linspace(1, 0, S + 1)  # [S + 1] float32
            frac = 1 - t[i + 1] / t[i]
            return min(n, int(torch.tensor(n, dtype=torch.float32) * frac)), False
        if "quota" not in state.memory:  # generate: the schedule fixed at the block's start
            state.memory["quota"] = [n // S + (1 if j < n % S else 0) for j in range(S)]
        return min(n, state.memory["quota"][i]), False

    def _factor_count(self, ranked: torch.Tensor) -> int:
        """The factor rule on the block's N scores in descending order [N]: commit ranks 0..i-1 for the
        first i >= 1 with score below 1 - factor / (i + 2), all N if that is the last rank or none is."""
        N = ranked.numel()
        for i in range(1, N - 1):  # the last rank's bound is never tested
            if bool(ranked[i] < 1 - self.params.factor / (i + 2)):
                return i
        return N
