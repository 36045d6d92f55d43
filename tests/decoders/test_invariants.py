"""Properties every decoder must satisfy (DESIGN.md section 4), on a scripted model."""
import pytest
import torch

from ripple.decoders import build, names
from ripple.platform.engine import Engine, GenerationConfig
from tests.scripted import ScriptedModel, hashed_script

V, MASK, EOS = 40, 39, 1
CACHES = ["none", "prefix", "dual"]
PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19]]


def mask_loving_script(vocab):
    """Hashed logits, but the mask id is the top-1 at every other position."""
    base = hashed_script(vocab)

    def script(pos, seen):
        logits = base(pos, seen)
        if pos % 2 == 0:
            logits[MASK] = logits.max() + 5.0
        return logits

    return script


def _engine(script=None, shift=0):
    model = ScriptedModel(V, script or mask_loving_script(V), shift=shift)
    return Engine(model, mask_id=MASK, eos_ids=[EOS], pad_id=0), model


DECODERS = [("default", {}), ("confidence", {"tau": "0.9"}), ("confidence", {"tau": "0.3"}),
            ("confidence", {"factor": "1.0"}),
            ("klass", {}), ("klass", {"tau": "0.2", "kappa": "50.0", "H": "1"}),
            ("eb_sampler", {}), ("eb_sampler", {"gamma": "3.0"}),
            ("wino", {}), ("wino", {"tau1": "0.2", "tau2": "0.95"}),
            ("lopa", {}), ("lopa", {"tau": "0.5", "branches": "3"})]


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name,settings", DECODERS)
def test_invariants(name, settings, cache, shift):
    engine, model = _engine(shift=shift)
    events = []
    cfg = GenerationConfig(gen_length=12, block_length=4, cache=cache)
    out = engine.generate([PROMPTS[0]], build(name, settings), cfg, trace=events.append)[0]
    assert MASK not in out.tokens  # every block ends unmasked, the mask id is never committed
    assert out.nfe == model.calls  # NFE counts exactly the forwards run
    steps = [e for e in events if e["phase"] == "step"]
    for e in steps:  # commits (and remasks) only inside the current block, at least one net commit per step
        assert len(e["committed"]) - len(e.get("remasked", [])) >= 1, e
        for p in [p for p, _ in e["committed"]] + e.get("remasked", []):
            assert 4 * e["block"] <= p < 4 * (e["block"] + 1)
    # no forward once a block is complete: exactly one forward per step except each block's last
    # (remasking decoders too: a WINO step's verification rides on that step's single forward)
    assert out.nfe == 3 + sum(1 for e in steps if e["forward"] is not None)
    assert sum(e["forward"] is None for e in steps) == 3
    again = _engine(shift=shift)[0].generate([PROMPTS[0]], build(name, settings), cfg)[0]
    assert again.tokens == out.tokens and again.nfe == out.nfe  # deterministic


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name,settings", DECODERS)
def test_batch_equals_single_runs(name, settings, cache):
    cfg = GenerationConfig(gen_length=8, block_length=4, cache=cache)
    batch_engine, model = _engine()
    batch = batch_engine.generate(PROMPTS, build(name, settings), cfg)
    singles = [_engine()[0].generate([p], build(name, settings), cfg)[0] for p in PROMPTS]
    assert [b.tokens for b in batch] == [s.tokens for s in singles]
    assert [b.nfe for b in batch] == [s.nfe for s in singles]
    assert model.row_calls == sum(s.nfe for s in singles)  # a finished row is not forwarded


def test_default_commits_one_token_per_step():
    engine, model = _engine()
    out = engine.generate([PROMPTS[0]], build("default"), GenerationConfig(16, 4))[0]
    assert out.nfe == 16 == model.calls


def test_confident_model_decodes_each_block_in_one_forward():
    def sure(pos, seen):
        logits = torch.full((V,), -10.0)
        logits[(pos * 7) % 30 + 2] = 10.0
        return logits

    engine, model = _engine(sure)
    out = engine.generate([PROMPTS[1]], build("confidence", {"tau": "0.9"}), GenerationConfig(16, 4, "dual"))[0]
    assert out.nfe == 4 == model.calls  # block-opening forward only; no forward after the block completes
    assert list(out.tokens) == [(p * 7) % 30 + 2 for p in range(3, 19)]


def test_confidence_threshold_rule_commits_exactly_the_confident_set():
    # position-dependent confidence: block positions 0 and 2 certain, others not
    def script(pos, seen):
        logits = torch.zeros(V)
        logits[3] = 20.0 if pos % 4 in (0, 2) else 1.0
        logits[4] = 0.5
        return logits

    engine, _ = _engine(script)
    events = []
    engine.generate([[5, 6, 7, 8]], build("confidence", {"tau": "0.9"}), GenerationConfig(4, 4), trace=events.append)
    first = events[0]["committed"]
    assert sorted(p for p, _ in first) == [0, 2]  # prompt of 4 -> response pos 0 is canvas pos 4 (pos%4==0)


def test_factor_rule():
    confs = {0: 0.99, 1: 0.8, 2: 0.7, 3: 0.6}

    def script(pos, seen):
        c = confs[(pos - 4) % 4]
        logits = torch.full((V,), -30.0)
        logits[3] = 0.0
        # two-token distribution with top-1 probability c (other mass on token 4)
        logits[4] = torch.log(torch.tensor((1 - c) / c))
        return logits

    engine, _ = _engine(script)
    events = []
    engine.generate([[5, 6, 7, 8]], build("confidence", {"factor": "1.0"}), GenerationConfig(4, 4), trace=events.append)
    # sorted 0.99, 0.8, 0.7, 0.6 against 1 - 1/(k+1) = 0.5, 0.667, 0.75, 0.8 -> n = 2
    assert sorted(p for p, _ in events[0]["committed"]) == [0, 1]


def test_stop_at_eos():
    def script(pos, seen):
        logits = torch.full((V,), -10.0)
        logits[EOS if pos >= 9 else 20] = 10.0
        return logits

    engine, model = _engine(script)
    out = engine.generate([[5, 6, 7]], build("confidence"), GenerationConfig(16, 4, stop_at_eos=True))[0]
    # EOS committed at canvas position 9 (block 1); block 2 and 3 never run
    assert out.nfe == 2 == model.calls
    assert out.tokens[:6] == (20,) * 6 and set(out.tokens[6:]) == {EOS}
    assert out.generated_tokens == 6
    full = _engine(script)[0].generate([[5, 6, 7]], build("confidence"), GenerationConfig(16, 4))[0]
    assert full.nfe == 4


def test_registry_lists_decoders():
    assert names() == ["default", "confidence", "klass", "eb_sampler", "wino", "lopa", "rps"]
