"""KLASS commits confident positions only once their KL to the previous step stayed below
kappa for H steps, and otherwise falls back to the single most confident position."""
import pytest

from ripple.decoders import build
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import ScriptedModel, peaked, view

V, MASK, L = 40, 39, 6
PROMPT = [5, 6, 7, 8]  # block b is canvas positions 4 + 6b .. 9 + 6b
STABLE = {0: 0.999, 1: 0.998, 2: 0.95, 4: 0.6, 5: 0.6}  # constant top-1 probability per block position
UNSTABLE = 3  # confident, but its distribution alternates with every commit in the block


def _script(shift):
    def script(pos, seen):
        target = pos + shift
        j, start = (target - 4) % L, target - (target - 4) % L
        canvas, _ = view(seen, MASK)
        d = sum(canvas.get(start + i, MASK) != MASK for i in range(L))  # decoded positions in the block
        if j == UNSTABLE:
            return peaked(V, 10 + j, 0.91 if d % 2 == 0 else 0.99, runner_up=30)
        return peaked(V, 10 + j, STABLE[j])

    return script


def _run(settings, shift=0, cache="none"):
    """Both blocks' steps as ([committed block positions], fallback?)."""
    model = ScriptedModel(V, _script(shift), shift=shift)
    engine = Engine(model, mask_id=MASK, eos_ids=[1], pad_id=0)
    events = []
    out = engine.generate([PROMPT], build("klass", settings), GenerationConfig(2 * L, L, cache), trace=events.append)[0]
    assert out.nfe == model.calls
    assert list(out.tokens) == [10 + j for j in range(L)] * 2
    opens = [sorted(p % L for p, _ in e["committed"]) for e in events if e["phase"] == "open"]
    assert opens == ([[0], [0]] if shift else [])  # Dream: the engine commits position 0 at each opening
    return [[(sorted(p % L for p, _ in e["committed"]), e["fallback"]) for e in events
             if e["block"] == b and e["phase"] == "step"] for b in range(2)]


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_waits_for_h_stable_steps_and_falls_back_to_top1(cache):
    first, second = _run({}, 0, cache)  # tau 0.9, kappa 0.01, H 2
    assert first == [
        ([0], True),  # no predecessor: only the top-1, though 1, 2 and 3 are confident too
        ([1], True),  # one KL step < H: still the top-1 only
        ([2], False),  # two stable steps: position 2 is ready; unstable 3 (confident) is not
        ([3], True),  # nothing ready (3 unstable, 4 and 5 unconfident): top-1
        ([4], True),  # tie 0.6 / 0.6: the lower position
        ([5], True),
    ]
    # the history runs across the block boundary, as in the official loop: the second block's
    # positions were computed (and constant) in the first block's forwards, so its first KL is
    # already measured and its second step finds 1 and 2 stable; a per-block history would
    # wait until the third step
    assert second == [([0], True), ([1, 2], False), ([3], True), ([4], True), ([5], True)]


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_dream_block_opening_and_cross_block_history(cache):
    # the engine commits position 0 at each opening; the decoder's first step reads the next
    # forward, compared with the last forward of the previous block (where 3 read d = 0, now d = 1)
    first, second = _run({}, 1, cache)
    assert first == [([1], True), ([2], True), ([3], True), ([4], True), ([5], True)]
    assert second == [([1], True), ([2], False), ([3], True), ([4], True), ([5], True)]


def test_history_length_and_kl_threshold():
    # H = 1: one stable step suffices (3 looks stable from d = 1 to d = 3: same parity); the second
    # block's first step is already stable against the first block's last forward
    first, second = _run({"H": "1"})
    assert first[:3] == [([0], True), ([1, 2], False), ([3], False)]
    assert second == [([0, 1, 2, 3], False), ([4], True), ([5], True)]
    # alternating KLs of about 0.06 and 0.12 pass a loose kappa: 3 becomes ready with 2
    first, second = _run({"kappa": "0.5"})
    assert first[:3] == [([0], True), ([1], True), ([2, 3], False)] and second[1] == ([1, 2, 3], False)
    # a confidence bar above 0.95 leaves only the fallback
    assert all(fallback for block in _run({"tau": "0.999"}) for _, fallback in block)
