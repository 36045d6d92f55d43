"""Proposition 1 of the RPS paper (entropy-certified parallelism) on ripple-tiny's real distributions."""
import math

import pytest
import torch

from ripple.decoders.rps import RPS, RPSParams, entropy
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.platform.runtime.loading import load_model
from ripple.tasks import get_task


class Recording(RPS):
    """RPS that keeps every lookahead it resolves (not registered: a test double of the real rule)."""

    def __init__(self, params):
        super().__init__(params)
        self.seen = []

    def resolve(self, state, plan, look):
        self.seen.append((state.masked.clone(), plan.info["pivot"], look))
        return super().resolve(state, plan, look)


def binary_entropy(t: float) -> float:
    return -t * math.log(t) - (1 - t) * math.log(1 - t)


def test_entropy_certified_lower_bound_on_next_step_commits():
    lm = load_model("ripple-tiny", "float32", "cpu")
    engine = Engine.from_loaded(lm)
    decoder = Recording(RPSParams(tau_pivot=0.5, r=0.05))
    for task in ("arith", "pyfunc", "freefunc"):  # freefunc: where the pivots are
        for ex in get_task(task).examples("test", 12):
            ids = lm.tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
            engine.generate([ids], decoder, GenerationConfig(48, 16))
    assert len(decoder.seen) >= 20, len(decoder.seen)
    check_bound(decoder.seen)


@pytest.mark.parametrize("checkpoint", ["llada2-tiny", "sdar-tiny"])
def test_entropy_certified_lower_bound_on_block_diffusion(golden, checkpoint):
    """The same bound on the block-diffusion families (random llada2-tiny, MoE; random sdar-tiny, Qwen3;
    lookaheads under block-causal attention, the first block holding the prompt's tail)."""
    lm = load_model(str(golden / checkpoint), "float32", "cpu")
    engine = Engine.from_loaded(lm)
    decoder = Recording(RPSParams(tau_pivot=0.3, r=0.05))
    g = torch.Generator().manual_seed(0)
    for n in (5, 11, 16, 21, 9, 13):
        for cache in ("none", "prefix"):
            engine.generate([torch.randint(0, 150, (n,), generator=g).tolist()], decoder, GenerationConfig(32, 8, cache))
    assert len(decoder.seen) >= 20, len(decoder.seen)
    check_bound(decoder.seen, min_tight=20)


def check_bound(seen, min_tight=50):
    """Proposition 1 on every recorded lookahead: N_tau(c) >= n - floor(n * mean H / h(tau)) per branch."""
    checked = tight = 0
    for masked, pivot, look in seen:
        downstream = masked.clone()
        downstream[pivot] = False
        n = int(downstream.sum())
        branches = torch.cat((look.anchor[None], look.variants))  # [m + 1, L, V]: MASK branch first
        p = torch.softmax(branches.double(), -1)[:, downstream]  # [m + 1, n, V]
        h_bar = entropy(p).mean(-1)  # [m + 1]
        top = p.max(-1).values  # [m + 1, n]
        for tau in (0.5, 0.6, 0.75, 0.9, 0.95):
            count = (top >= tau).sum(-1)  # N_tau(c) per branch
            bound = (n - torch.floor(n * h_bar / binary_entropy(tau))).clamp(min=0)
            assert bool((count >= bound).all()), (tau, count.tolist(), bound.tolist())
            checked += len(bound)
            tight += int((bound > 0).sum())
    assert tight >= min_tight, (tight, checked)  # the bound is not vacuous on these distributions
