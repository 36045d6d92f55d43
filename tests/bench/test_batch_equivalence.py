"""The batch-equivalence check: it finds a sample whose batched run differs, and tells a near-tie
(float noise flipping a decision between two options closer than 1e-5) from a real difference."""
import json

import pytest
import torch

from ripple.bench.batch_equivalence import NEAR_TIE, decision_gap, explain
from ripple.bench.cli import main
from ripple.decoders import build
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import ScriptedModel

V, MASK, EOS = 40, 39, 1
PROMPTS = [[5, 6, 7], [8, 9, 10]]


class BatchNoise:
    """A scripted model whose batched forwards add `noise` to the runner-up token's logit, as a
    differently shaped matrix product may perturb the last bits."""

    def __init__(self, gap: float, noise: float):
        def script(pos, seen):
            logits = torch.full((V,), -30.0, dtype=torch.float64)
            tok = (pos * 7) % 30 + 2
            logits[tok], logits[tok + 1] = 5.0, 5.0 - gap
            logits[tok + 2] = 3.0 - pos % 4  # confidences that differ by position: no tie between positions
            return logits

        self.inner, self.noise = ScriptedModel(V, script), noise
        self.shift, self.opening_commit = 0, False
        self.vocab_size = V

    def __call__(self, tokens, *args, **kwargs):
        out = self.inner(tokens, *args, **kwargs)
        if tokens.shape[0] > 1:
            pos = kwargs.get("positions", args[0] if args else None)
            rows = out.logits.shape[1]
            for b in range(tokens.shape[0]):
                for j in range(rows):
                    out.logits[b, j, (int(pos[b, -rows + j]) * 7) % 30 + 3] += self.noise
        return out


@pytest.mark.parametrize("gap,noise,near", [(2e-6, 4e-6, True), (1.0, 2.0, False)])
def test_a_differing_sample_is_traced_to_its_first_decision_and_judged_by_its_top2_gap(gap, noise, near):
    engine = Engine(BatchNoise(gap, noise), mask_id=MASK, eos_ids=[EOS], pad_id=0)
    cfg = GenerationConfig(gen_length=4, block_length=4)
    one = engine.generate([PROMPTS[1]], build("default"), cfg)[0]
    many = engine.generate(PROMPTS, build("default"), cfg)[1]
    assert one.tokens != many.tokens  # the noise flips the top token
    d = explain(engine, "default", {}, cfg, PROMPTS, 1, one, many, cache="none", task="t", sample_id="s")
    assert d.decision == (0, 0, "step") and d.positions == (0,)  # the first step commits a different token
    assert d.gap == pytest.approx(gap, rel=0.1) and d.gap_kind == "token logits"  # float32 logits
    assert d.delta == pytest.approx(noise, rel=0.1)
    assert d.near_tie is near and (d.gap < NEAR_TIE) is near
    assert ("near-tie" if near else "NOT a near-tie") in d.describe()


def test_a_commit_that_flips_at_a_threshold_or_a_lookahead_choice_is_measured_against_it():
    logits = torch.full((4, V), -30.0, dtype=torch.float64)
    logits[:, 3] = 0.0
    logits[:, 4] = torch.log(torch.tensor((1 - 0.9000003) / 0.9000003, dtype=torch.float64))  # top-1 p = 0.9000003
    step = {"block": 0, "step": 0, "phase": "step", "forward": "normal"}
    a, b = {**step, "committed": [[1, 3], [2, 3]]}, {**step, "committed": [[2, 3]]}  # position 1 cleared tau once
    positions, gap, kind = decision_gap({"logits": logits}, a, b, 4, thresholds=[0.9])
    assert positions == [1] and gap == pytest.approx(3e-7, rel=1e-3) and kind == "confidence vs threshold 0.9"
    assert decision_gap({"logits": logits}, a, b, 4)[1] is None  # nothing to compare without the threshold
    resolve = {"block": 0, "step": 1, "phase": "resolve", "forward": None, "committed": [[3, 7]],
               "candidates": [{"token": 7, "score": -1.2}, {"token": 8, "score": -1.2 - 4e-6}, {"token": "MASK",
                                                                                            "score": -3.0}]}
    positions, gap, kind = decision_gap(None, resolve, {**resolve, "committed": [[3, 8]]}, 4)
    assert positions == [3] and gap == pytest.approx(4e-6) and kind == "candidate scores"


@pytest.mark.slow
def test_batch_8_equals_batch_1_on_a_demo_subset(capsys):
    """rps and lopa mix lookahead and plain forwards across a batch; wino adds its shadow rows."""
    code = main(["--batch-equivalence", "--caches", "none,dual", "--decoders", "default,rps,lopa,wino",
                 "--tasks", "arith", "--limit", "10", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["samples"] == 2 * 4 * 10 and report["cells"] == 4
    assert report["unexplained"] == 0 and code == 0  # any difference must be a near-tie
    assert report["differing"] == len(report["divergences"])
