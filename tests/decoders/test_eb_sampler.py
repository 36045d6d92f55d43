"""EB-Sampler commits exactly the largest entropy-bounded prefix of the entropy-sorted block."""
import pytest
import torch

from ripple.decoders import build
from ripple.decoders.base import entropy
from ripple.platform.engine import Engine, GenerationConfig
from tests.scripted import ScriptedModel, peaked

V, MASK = 40, 39
PROMPT = [5, 6, 7, 8]  # the block is canvas positions 4..7
# top-1 probability and token per block position: entropies out of position order, and
# positions 1 and 3 share one distribution, so their entropies tie exactly
TOP = {0: 0.6, 1: 0.97, 2: 0.8, 3: 0.97}
TOKEN = {0: 10, 1: 11, 2: 13, 3: 11}


def _logits(j: int) -> torch.Tensor:
    return peaked(V, TOKEN[j], TOP[j])


def _run(gamma: float, shift: int, cache: str = "none"):
    model = ScriptedModel(V, lambda pos, seen: _logits(pos + shift - 4), shift=shift)
    engine = Engine(model, mask_id=MASK, eos_ids=[1], pad_id=0)
    events = []
    out = engine.generate([PROMPT], build("eb_sampler", {"gamma": repr(gamma)}), GenerationConfig(4, 4, cache),
                          trace=events.append)[0]
    assert out.nfe == model.calls
    return [sorted(p for p, _ in e["committed"]) for e in events], out


def _entropies() -> dict[int, float]:
    return {j: float(entropy(torch.softmax(_logits(j).to(torch.float64), -1))) for j in TOP}


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_largest_prefix_on_both_sides_of_gamma(shift, cache):
    h = _entropies()
    assert h[1] == h[3] < h[2] < h[0]  # sorted order 1, 3 (tie: lower position first), 2, 0
    bound = h[1] + h[3]  # the prefix {1, 3, 2} has sum - max = h1 + h3
    steps, out = _run(bound + 1e-9, shift, cache)
    assert steps[0] == [1, 2, 3]
    steps, out = _run(bound - 1e-9, shift, cache)
    assert steps == [[1, 3], [2], [0]]  # then h2 alone fits, then the last one
    assert out.nfe == 3 and list(out.tokens) == [10, 11, 13, 11]


def test_zero_budget_commits_one_and_ties_go_to_the_lower_position():
    steps, _ = _run(0.0, 0)
    assert steps == [[1], [3], [2], [0]]


def test_large_budget_commits_the_whole_block_in_one_step():
    steps, out = _run(sum(_entropies().values()), 0)
    assert steps == [[0, 1, 2, 3]] and out.nfe == 1
