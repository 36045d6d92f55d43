"""LoPA continues from the branch (anchor included) with the highest mean confidence over its
still-masked positions and reuses that branch's logits: one packed forward per step."""
import pytest

from ripple.decoders import build
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import ScriptedModel, peaked, spread, view

V, MASK, L = 40, 39, 4
PROMPT = [5, 6, 7, 8]  # the block is canvas positions 4..7

# top-1 probability of each masked block position, by the set of decoded block positions
WINS_B2 = {
    (): {0: 0.95, 1: 0.6, 2: 0.5, 3: 0.4},  # anchor commits 0; branches at 1 and 2
    (0,): {1: 0.6, 2: 0.5, 3: 0.4},  # anchor: mean 0.5
    (0, 1): {2: 0.55, 3: 0.55},  # branch at 1: mean 0.55
    (0, 2): {1: 0.97, 3: 0.93},  # branch at 2: mean 0.95, and both clear tau next step
}
ANCHOR_WINS = {**WINS_B2, (0,): {1: 0.8, 2: 0.79, 3: 0.78}, (0, 2): {1: 0.45, 3: 0.45}}


def _shifted(table, shift):
    """The same scenario one position later when the engine commits position 0 at the opening (Dream)."""
    if not shift:
        return table
    return {(0, *(d + 1 for d in decoded)): {j + 1: c for j, c in confs.items()} for decoded, confs in table.items()}


def _script(table, shift):
    n = L + shift

    def script(pos, seen):
        target = pos + shift
        canvas, _ = view(seen, MASK)
        decoded = tuple(j for j in range(n) if canvas.get(4 + j, MASK) != MASK)
        conf = table.get(decoded, {}).get(target - 4, 0.3)
        return peaked(V, 16 + target, conf) if conf > 0.5 else spread(V, 16 + target, conf)

    return script


def _run(table, shift=0, cache="none", settings=None):
    model = ScriptedModel(V, _script(_shifted(table, shift), shift), shift=shift)
    engine = Engine(model, mask_id=MASK, eos_ids=[1], pad_id=0)
    events = []
    lopa = build("lopa", settings or {})
    out = engine.generate([PROMPT], lopa, GenerationConfig(L + shift, L + shift, cache), trace=events.append)[0]
    return out, [e for e in events if e["phase"] != "open"], model


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_picks_the_most_confident_branch_and_reuses_its_logits(shift, cache):
    out, events, model = _run(WINS_B2, shift, cache)
    f = shift  # Dream: the engine committed position 0 at the opening; the scenario starts at 1
    step0, resolve, step1 = events
    assert step0["committed"] == [[f, 20 + f]] and step0["branches"] == [1 + f, 2 + f]
    assert step0["forward"] == "lookahead"
    assert resolve["phase"] == "resolve" and resolve["chosen"] == 2 + f and resolve["committed"] == [[2 + f, 22 + f]]
    assert resolve["scores"] == pytest.approx([0.5, 0.55, 0.95], abs=1e-6)  # anchor, branch 1, branch 2
    # the next step decides on branch 2's distributions (1 and 3 now clear tau) with no forward between
    assert sorted(step1["committed"]) == [[1 + f, 21 + f], [3 + f, 23 + f]] and step1["forward"] is None
    assert list(out.tokens) == list(range(20, 24 + f))
    # opening (+ the forward after a Dream opening commit) + one packed forward
    assert out.nfe == 2 + f == model.calls and out.lookahead_nfe == 1


def test_the_anchor_competes_and_its_logits_are_carried():
    out, events, model = _run(ANCHOR_WINS)
    resolve = events[1]
    assert resolve["chosen"] == "anchor" and resolve["committed"] == []
    assert resolve["scores"] == pytest.approx([0.79, 0.55, 0.45], abs=1e-6)
    # carried anchor distributions: all below tau, so the standard commit takes the top-1, position 1
    assert events[2]["committed"] == [[1, 21]]
    assert MASK not in out.tokens and out.nfe == model.calls


def test_branching_factor_limits_the_branches():
    _, events, _ = _run(WINS_B2, settings={"branches": "1"})
    assert events[0]["branches"] == [1]
    assert events[1]["chosen"] == 1  # branch 1 (0.55) beats the anchor (0.5); branch 2 was never formed
