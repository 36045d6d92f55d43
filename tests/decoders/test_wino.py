"""WINO drafts wide, verifies drafted tokens through the leave-one-out shadow, remasks those
below tau2 (at most the previous step's drafted count minus one, as the official loop does),
and still finishes every block, even when verification keeps rejecting.

With shift 1 (Dream) the engine commits each block's first position at the opening; the
scripts then run the same scenario one position later, in a block one position longer."""
import pytest
import torch

from ripple.decoders import build
from ripple.decoders.wino import Wino
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import ScriptedModel, peaked, spread, view

V, MASK, L = 40, 39, 4
CACHES = ["none", "prefix", "dual"]


def _response(canvas):
    """First response position (prompt ids are < 20; response tokens are >= 20 or the mask)."""
    return min(p for p, t in canvas.items() if t >= 20)


def _block(canvas, target, L=L):
    n = _response(canvas)
    start = n + (target - n) // L * L
    return target - start, [canvas.get(start + i, MASK) != MASK for i in range(L)]  # j, decoded flags


def _engine(script, shift):
    model = ScriptedModel(V, script, shift=shift)
    return Engine(model, mask_id=MASK, eos_ids=[1], pad_id=0), model


def revoke_script(shift, verify0, shadow_log):
    """Drafts f and f + 1 first, then f + 2 and f + 3 (f = shift, the first position the decoder
    drafts); the shadow trusts every token but f's (verify0)."""

    def script(pos, seen):
        target = pos + shift
        canvas, shadow = view(seen, MASK)
        j, done = _block(canvas, target, L + shift)
        if shadow:
            shadow_log.append((target, canvas))
            return peaked(V, 20 + j, verify0 if j == shift else 0.99)
        ready = j < shift + 2 or done[shift] or done[shift + 1]
        return peaked(V, 20 + j, 0.95) if ready else spread(V, 20 + j, 0.3)

    return script


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", CACHES)
def test_remasks_a_token_whose_verification_is_below_tau2(shift, cache):
    shadow_log = []
    engine, model = _engine(revoke_script(shift, 0.5, shadow_log), shift)
    events = []
    f, n = shift, L + shift
    out = engine.generate([[5, 6, 7, 8]], build("wino"), GenerationConfig(n, n, cache), trace=events.append)[0]
    steps = [(sorted(p for p, _ in e["committed"]), e.get("remasked", []), e["forward"])
             for e in events if e["phase"] == "step"]
    assert steps == [([f, f + 1], [], "shadow"),  # nothing decoded yet: nothing to verify
                     ([f + 2, f + 3], [f], "shadow"),  # f verified at 0.5 < 0.9: remasked; f + 1 kept
                     ([f], [], None)]  # redrafted; the block is complete, no forward
    assert [e["committed"] for e in events if e["phase"] == "open"] == ([[[0, 20]]] if shift else [])
    assert list(out.tokens) == list(range(20, 20 + n))
    assert out.nfe == 3 + shift == model.calls and out.lookahead_nfe == 0
    # a shadow row sees its own position as a mask and the block's other tokens as they stand
    assert all(canvas[target] == MASK for target, canvas in shadow_log)
    assert any(target == 4 + f and canvas[5 + f] == 21 + f for target, canvas in shadow_log)
    # a shifted family's opening commit has no shadow row: it is never verified
    assert all(target != 4 for target, _ in shadow_log) or not shift


def cap_script(shift):
    """Four drafts first, then two per step; the shadow rejects the first three drafts while the
    fifth position is still masked (f = shift is the first position the decoder drafts)."""

    def script(pos, seen):
        target = pos + shift
        canvas, shadow = view(seen, MASK)
        j, done = _block(canvas, target, 8 + shift)
        k = j - shift
        if shadow:
            return peaked(V, 20 + j, 0.5 if k < 3 and not done[shift + 4] else 0.99)
        if not any(done[shift:]):
            return peaked(V, 20 + j, 0.95) if 0 <= k < 4 else spread(V, 20 + j, 0.3)
        lowest = [i for i in range(8 + shift) if not done[i]][:2]
        return peaked(V, 20 + j, 0.95) if j in lowest else spread(V, 20 + j, 0.3)

    return script


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", CACHES)
def test_remask_cap_is_the_previous_draft_minus_one(shift, cache):
    """min(failed, last drafted - 1), not capped again by this step's draft: the official rule."""
    engine, model = _engine(cap_script(shift), shift)
    events = []
    n = 8 + shift
    out = engine.generate([[5, 6, 7, 8]], build("wino"), GenerationConfig(n, n, cache), trace=events.append)[0]
    steps = [([p - shift for p, _ in sorted(e["committed"])], sorted(p - shift for p in e.get("remasked", [])))
             for e in events if e["phase"] == "step"]
    assert steps == [([0, 1, 2, 3], []),
                     ([4, 5], [0, 1, 2]),  # 3 failed, previous draft 4: all three (a draft-count cap: 1)
                     ([0, 1], []), ([2, 6], []), ([7], [])]
    assert list(out.tokens) == list(range(20, 20 + n)) and out.nfe == model.calls == 5 + shift


def test_no_remask_when_verification_reaches_tau2():
    engine, model = _engine(revoke_script(0, 0.5, []), 0)
    events = []
    wino = build("wino", {"tau2": "0.4"})
    out = engine.generate([[5, 6, 7, 8]], wino, GenerationConfig(L, L), trace=events.append)[0]
    assert [sorted(p for p, _ in e["committed"]) for e in events] == [[0, 1], [2, 3]]
    assert not any("remasked" in e for e in events) and out.nfe == 2 == model.calls


def oscillating_script(shift):
    """The two lowest masked positions of the block are confident; verification always fails.

    Remasking every failed token turns this into a loop: {f, f+1} drafted, then {f+2, f+3}
    drafted while {f, f+1} are remasked, then the reverse, forever (f = shift).
    """

    def script(pos, seen):
        target = pos + shift
        canvas, shadow = view(seen, MASK)
        j, done = _block(canvas, target, L + shift)
        if shadow:
            return peaked(V, 20 + j, 0.5)
        lowest = [i for i in range(L + shift) if not done[i]][:2]
        return peaked(V, 20 + j, 0.95) if j in lowest else spread(V, 20 + j, 0.3)

    return script


class RemaskAll(Wino):
    """WINO without the progress cap: every failed token is remasked."""

    def _narrow_out(self, state, n_draft):
        probs = state.shadow_probs
        if probs is None:
            return torch.zeros(0, dtype=torch.long), {}
        verify = probs.gather(-1, state.tokens[:, None]).squeeze(-1)
        return ((~state.masked) & ~state.fixed & (verify < self.params.tau2)).nonzero().squeeze(-1), {}


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", CACHES)
def test_finishes_every_block_where_remasking_everything_oscillates(shift, cache):
    n = L + shift
    cfg = GenerationConfig(3 * n, n, cache)
    with pytest.raises(RuntimeError, match="made no progress"):
        _engine(oscillating_script(shift), shift)[0].generate([[5, 6, 7, 8]], RemaskAll(), cfg)
    engine, model = _engine(oscillating_script(shift), shift)
    events = []
    out = engine.generate([[5, 6, 7, 8]], build("wino"), cfg, trace=events.append)[0]
    assert MASK not in out.tokens and list(out.tokens) == list(range(20, 20 + n)) * 3
    assert out.nfe == model.calls
    steps = [e for e in events if e["phase"] == "step"]
    for e in steps:  # here at least one net commit per step, so a block takes at most L steps
        assert len(e["committed"]) - len(e.get("remasked", [])) >= 1
    assert sum(len(e.get("remasked", [])) for e in steps) == 3  # one revocation per block
    assert all(sum(e["block"] == b for e in steps) <= L for b in range(3))


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
