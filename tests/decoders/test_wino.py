"""WINO drafts wide, verifies drafted tokens through the leave-one-out shadow, remasks those
below tau2, and still finishes every block, even when verification keeps rejecting."""
import pytest
import torch

from ripple.decoders import build
from ripple.decoders.wino import Wino
from ripple.platform.engine import Engine, GenerationConfig
from tests.scripted import ScriptedModel, peaked, spread, view

V, MASK, L = 40, 39, 4
CACHES = ["none", "prefix", "dual"]


def _response(canvas):
    """First response position (prompt ids are < 20; response tokens are >= 20 or the mask)."""
    return min(p for p, t in canvas.items() if t >= 20)


def _block(canvas, target):
    n = _response(canvas)
    start = n + (target - n) // L * L
    return target - start, [canvas.get(start + i, MASK) != MASK for i in range(L)]  # j, decoded flags


def _engine(script, shift):
    model = ScriptedModel(V, script, shift=shift)
    return Engine(model, mask_id=MASK, eos_ids=[1], pad_id=0), model


def revoke_script(shift, verify0, shadow_log):
    """Drafts 0 and 1 first, then 2 and 3; the shadow trusts every token but 0's (verify0)."""

    def script(pos, seen):
        target = pos + shift
        canvas, shadow = view(seen, MASK)
        j, done = _block(canvas, target)
        if shadow:
            shadow_log.append((target, canvas))
            return peaked(V, 20 + j, verify0 if j == 0 else 0.99)
        ready = j < 2 or done[0] or done[1]
        return peaked(V, 20 + j, 0.95) if ready else spread(V, 20 + j, 0.3)

    return script


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", CACHES)
def test_remasks_a_token_whose_verification_is_below_tau2(shift, cache):
    shadow_log = []
    engine, model = _engine(revoke_script(shift, 0.5, shadow_log), shift)
    events = []
    out = engine.generate([[5, 6, 7, 8]], build("wino"), GenerationConfig(L, L, cache), trace=events.append)[0]
    steps = [(sorted(p for p, _ in e["committed"]), e.get("remasked", []), e["forward"]) for e in events]
    assert steps == [([0, 1], [], "shadow"),  # nothing decoded yet: nothing to verify
                     ([2, 3], [0], "shadow"),  # 0 verified at 0.5 < 0.9: remasked; 1 kept
                     ([0], [], None)]  # redrafted; the block is complete, no forward
    assert list(out.tokens) == [20, 21, 22, 23]
    assert out.nfe == 3 == model.calls and out.lookahead_nfe == 0
    # a shadow row sees its own position as a mask and the block's other tokens as they stand
    assert all(canvas[target] == MASK for target, canvas in shadow_log)
    assert any(target == 4 and canvas[5] == 21 for target, canvas in shadow_log)

def test_no_remask_when_verification_reaches_tau2():
    engine, model = _engine(revoke_script(0, 0.5, []), 0)
    events = []
    wino = build("wino", {"tau2": "0.4"})
    out = engine.generate([[5, 6, 7, 8]], wino, GenerationConfig(L, L), trace=events.append)[0]
    assert [sorted(p for p, _ in e["committed"]) for e in events] == [[0, 1], [2, 3]]
    assert not any("remasked" in e for e in events) and out.nfe == 2 == model.calls


def oscillating_script(shift):
    """The two lowest masked positions of the block are confident; verification always fails.

    Remasking every failed token turns this into a loop: {0, 1} drafted, then {2, 3} drafted
    while {0, 1} are remasked, then the reverse, forever.
    """

    def script(pos, seen):
        target = pos + shift
        canvas, shadow = view(seen, MASK)
        j, done = _block(canvas, target)
        if shadow:
            return peaked(V, 20 + j, 0.5)
        lowest = [i for i in range(L) if not done[i]][:2]
        return peaked(V, 20 + j, 0.95) if j in lowest else spread(V, 20 + j, 0.3)

    return script


class RemaskAll(Wino):
    """WINO without the progress cap: every failed token is remasked."""

    def _narrow_out(self, state, n_draft):
        probs = state.shadow_probs
        if probs is None:
            return torch.zeros(0, dtype=torch.long), {}
        verify = probs.gather(-1, state.tokens[:, None]).squeeze(-1)
        return ((~state.masked) & (verify < self.params.tau2)).nonzero().squeeze(-1), {}


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", CACHES)
def test_finishes_every_block_where_remasking_everything_oscillates(shift, cache):
    cfg = GenerationConfig(3 * L, L, cache)
    with pytest.raises(RuntimeError, match="made no progress"):
        _engine(oscillating_script(shift), shift)[0].generate([[5, 6, 7, 8]], RemaskAll(), cfg)
    engine, model = _engine(oscillating_script(shift), shift)
    events = []
    out = engine.generate([[5, 6, 7, 8]], build("wino"), cfg, trace=events.append)[0]
    assert MASK not in out.tokens and list(out.tokens) == [20, 21, 22, 23] * 3
    assert out.nfe == model.calls
    for e in events:  # at least one net commit per step, so a block takes at most L steps
        assert len(e["committed"]) - len(e.get("remasked", [])) >= 1
    assert sum(len(e.get("remasked", [])) for e in events) == 3  # one revocation per block
    assert all(sum(e["block"] == b for e in events) <= L for b in range(3))


@pytest.mark.parametrize("cache", CACHES)
def test_batch_with_remasking_equals_single_runs(cache):
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]
    cfg = GenerationConfig(2 * L, L, cache)
    engine, model = _engine(oscillating_script(0), 0)
    batch = engine.generate(prompts, build("wino"), cfg)
    singles = [_engine(oscillating_script(0), 0)[0].generate([p], build("wino"), cfg)[0] for p in prompts]
    assert [b.tokens for b in batch] == [s.tokens for s in singles]
    assert [b.nfe for b in batch] == [s.nfe for s in singles]
    assert model.row_calls == sum(s.nfe for s in singles)
