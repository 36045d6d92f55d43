"""EB-Sampler commits exactly the largest entropy-bounded prefix of the block, sorted by entropy
(default) or by confidence (`order=confidence`, with the prefix's running maximum)."""
import json

import pytest
import torch

from ripple.cli import main
from ripple.decoders import build
from ripple.decoders.base import entropy
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import ScriptedModel, peaked, spread

V, MASK = 40, 39
PROMPT = [5, 6, 7, 8]  # the block is canvas positions 4..7
# top-1 probability and token per block position: entropies out of position order, and
# positions 1 and 3 share one distribution, so their entropies tie exactly
TOP = {0: 0.6, 1: 0.97, 2: 0.8, 3: 0.97}
TOKEN = {0: 10, 1: 11, 2: 13, 3: 11}


def _logits(j: int) -> torch.Tensor:
    return peaked(V, TOKEN[j], TOP[j])


def _run(gamma: float, shift: int, cache: str = "none", logits=_logits, order: str = "entropy"):
    model = ScriptedModel(V, lambda pos, seen: logits(pos + shift - 4), shift=shift)
    engine = Engine(model, mask_id=MASK, eos_ids=[1], pad_id=0)
    events = []
    decoder = build("eb_sampler", {"gamma": repr(gamma), "order": order})
    out = engine.generate([PROMPT], decoder, GenerationConfig(4, 4, cache), trace=events.append)[0]
    assert out.nfe == model.calls
    # Dream: the engine commits position 0 at the block opening; the rule runs on the rest
    assert [e["committed"] for e in events if e["phase"] == "open"] == ([[[0, TOKEN[0]]]] if shift else [])
    return [sorted(p for p, _ in e["committed"]) for e in events if e["phase"] == "step"], out


def _entropies(logits=_logits) -> dict[int, float]:
    return {j: float(entropy(torch.softmax(logits(j).to(torch.float64), -1))) for j in range(4)}


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_largest_prefix_on_both_sides_of_gamma(shift, cache):
    h = _entropies()
    assert h[1] == h[3] < h[2] < h[0]  # sorted order 1, 3 (tie: lower position first), 2, 0
    bound = h[1] + h[3]  # the prefix {1, 3, 2} has sum - max = h1 + h3
    steps, out = _run(bound + 1e-9, shift, cache)
    assert steps[0] == [1, 2, 3]
    steps, out = _run(bound - 1e-9, shift, cache)
    assert steps == [[1, 3], [2]] + ([] if shift else [[0]])  # then h2 alone fits, then the last one
    assert out.nfe == 3 and list(out.tokens) == [10, 11, 13, 11]


def test_zero_budget_commits_one_and_ties_go_to_the_lower_position():
    steps, _ = _run(0.0, 0)
    assert steps == [[1], [3], [2], [0]]


def test_large_budget_commits_the_whole_block_in_one_step():
    steps, out = _run(sum(_entropies().values()), 0)
    assert steps == [[0, 1, 2, 3]] and out.nfe == 1


# confidence order 0, 1, 2, 3 (top-1 0.9, 0.8, 0.7, 0.6); entropy order 1, 2, 0, 3: position 0 is
# the most confident but spreads its rest over the vocabulary, so its entropy exceeds 1's and 2's
def _mixed(j: int) -> torch.Tensor:
    return [spread(V, 10, 0.9), peaked(V, 11, 0.8), peaked(V, 13, 0.7), spread(V, 14, 0.6)][j]


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_confidence_order_takes_the_running_maximum(cache):
    h = _entropies(_mixed)
    assert h[1] < h[2] < h[0] < h[3]
    # prefixes in confidence order: sum - running max = 0, h1, h1 + h2, h0 + h1 + h2
    assert h[1] < 0.55 < h[1] + h[2] < 1.15 < h[0] + h[1] + h[2]
    # were a prefix's maximum taken as its last entry, {0, 1} would cost h0 > 0.55 and {0, 1, 2}
    # h0 + h1 > 1.15: neither would be committed
    assert h[0] > 0.55 and h[0] + h[1] > 1.15
    steps, out = _run(0.55, 0, cache, _mixed, "confidence")
    assert steps == [[0, 1], [2], [3]]  # then 2 alone (h2 + h3 - h3 = h2 > 0.55), then 3
    steps, _ = _run(1.15, 0, cache, _mixed, "confidence")
    assert steps[0] == [0, 1, 2]
    steps, _ = _run(0.55, 0, cache, _mixed, "entropy")  # the default order picks other positions
    assert steps == [[1, 2], [0], [3]]
    assert list(out.tokens) == [10, 11, 13, 14]


def test_order_is_a_validated_hyperparameter(golden, capsys):
    argv = ["generate", "--model", str(golden / "llada-tiny"), "--input-ids", "12,40,77,3,90,15", "--decoder",
            "eb_sampler", "--set", "order=confidence", "--set", "gamma=2.5", "--gen-length", "16",
            "--block-length", "8", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] == {"gamma": 2.5, "order": "confidence"} and 150 not in out["tokens"]
    assert main([a.replace("=confidence", "=entropyy") for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "order='entropyy' is invalid; accepted: one of entropy, confidence" in err
