"""Properties every decoder must satisfy (DESIGN.md section 4), on a scripted model."""
import atexit
import json
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from ripple.decoders import build, decoders_for, get, names
from ripple.decoders.confidence import Confidence
from ripple.platform.runtime.engine import GenerationConfig
from ripple.testing import (FAMILIES, SCRIPTED_EOS, SCRIPTED_MASK, SCRIPTED_PROMPTS, SCRIPTED_VOCAB, check_decoder,
                            check_decoder_on_model, check_follower, check_renoising_decoder, scripted_engine)

V, MASK, EOS = SCRIPTED_VOCAB, SCRIPTED_MASK, SCRIPTED_EOS
CACHES = ["none", "prefix", "dual"]
PROMPTS = [list(p) for p in SCRIPTED_PROMPTS]
SHIFTS = [0, 1, "bc"]  # _engine's names of the scripted families, for tests of particular rules


def _engine(script=None, shift=0):
    """shift 0 / 1: a LLaDA- / Dream-like family; "bc": block-causal (LLaDA2's block diffusion)."""
    return scripted_engine({0: "full", 1: "shifted", "bc": "block_causal"}[shift], script)


# every registered decoder of mask families (the scripted model is one; by the declared `noise`) at its
# defaults (a new decoder module is tested without editing this file), plus settings that make the rules
# act on this scripted model. Renoising decoders: test_renoising_invariants below, on diffusion-gemma-tiny.
# (the block decoders: apd runs under its own window with a verifier, tests/decoders/test_apd.py)
DECODERS = [(name, {}) for name in decoders_for("mask", "none")] + [
    ("confidence", {"tau": "0.3"}), ("confidence", {"factor": "1.0"}),
    ("klass", {"tau": "0.2", "kappa": "50.0", "H": "1"}), ("eb_sampler", {"gamma": "3.0"}),
    ("wino", {"tau1": "0.2", "tau2": "0.95"}), ("lopa", {"tau": "0.5", "branches": "3"}),
    ("rps", {"tau_pivot": "0.3", "pivot": "max_entropy"}), ("rps", {"tau_pivot": "0.3", "carry": "false"}),
    ("dinfer_threshold", {"tau": "0.3"}), ("hierarchy", {"tau": "0.5", "low_tau": "0.1"}),
    ("credit", {"tau": "0.3", "alpha": "1.5", "gamma": "0.5", "beta": "0.5"}),
    ("pc_sampler", {"lambda": "0.5", "alpha": "2.0"}), ("dus", {"base": "2", "remask_tau": "0.3"}),
    ("slow_fast", {"explore_steps": "2", "span_tau": "0.2", "fill_tau": "0.3"}),
    ("topk", {"rank": "margin", "k": "2"}), ("topk", {"rank": "random", "k": "2"}),
    ("topk", {"rank": "entropy", "tau": "0.3"}), ("topk", {"rank": "random", "factor": "1.0"}),
    ("learn2pd", {"threshold": "0.3", "eot": "true"}), ("learn2pd", {"filter": "none", "eot": "true"}),
    ("learn2pd", {"threshold": "0.3", "steps": "12"})]

# data a decoder reads from files (PC-Sampler's token-frequency prior): one that fits every vocabulary here
PRIOR = Path(tempfile.mkdtemp(prefix="ripple-prior-")) / "prior.json"
atexit.register(shutil.rmtree, PRIOR.parent, True)  # importing this module (many test files do) leaves no folder
PRIOR.write_text(json.dumps({"num_token": 1000, "p_baseline_dict": {str(i): 30 + i for i in range(3, 30)}}))
DATA = {"pc_sampler": {"prior": str(PRIOR)}}


def _filters() -> dict[int, str]:
    """Learn2PD filters (the golden files' architecture, seeded weights) for the block lengths used here:
    4 on the scripted model, 8 on the golden checkpoints, 16 on ripple-tiny-bd; no model named, so every model
    accepts them."""
    from ripple.decoders.filters import FilterCard, build_filter, save_filter

    out = {}
    for b in (4, 8, 16):
        torch.manual_seed(b)
        card = FilterCard("learn2pd", b, ("confidence",))
        save_filter(PRIOR.parent / f"filter-b{b}", build_filter("learn2pd", b), card)
        out[b] = str(PRIOR.parent / f"filter-b{b}")
    return out


FILTERS = _filters()


def decoder(name, settings, block_length=4):
    """`build`, with the data files a decoder needs when the settings name none (a learned filter for the
    run's block length)."""
    data = {**DATA.get(name, {}), **({"filter": FILTERS[block_length]} if name == "learn2pd" else {})}
    return build(name, {**data, **settings})


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name,settings", DECODERS)
def test_invariants(name, settings, cache, family):
    """ripple.testing's checks (the ones a plugin's suite calls): trace invariants, determinism, batch = singles."""
    check_decoder(lambda: decoder(name, settings), families=[family], caches=[cache])


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


def test_registry_lists_decoders_in_display_order():
    shipped = ["default", "confidence", "sequential", "klass", "eb_sampler", "wino", "lopa", "rps"]
    assert [n for n in names() if n in shipped] == shipped  # other modules dropped into the package may add more


def test_a_plan_that_asks_for_more_than_the_decoder_declares_is_a_protocol_error():
    from ripple.decoders import Plan
    from ripple.errors import RippleError

    class Sneaky(Confidence):  # plans a lookahead without declaring uses_lookahead
        def step(self, state):
            plan = super().step(state)
            return Plan(plan.commit, variants=state.tokens[None].clone())

    with pytest.raises(RippleError, match="planned lookahead variants but does not declare uses_lookahead"):
        _engine()[0].generate([PROMPTS[0]], Sneaky(), GenerationConfig(8, 4))

    class Shady(Confidence):
        def step(self, state):
            return Plan(super().step(state).commit, shadow=True)

    with pytest.raises(RippleError, match="asked for a shadow forward but does not declare uses_shadow"):
        _engine()[0].generate([PROMPTS[0]], Shady(), GenerationConfig(8, 4))


class ConfidenceReadingBeyond(Confidence):
    """The threshold rule, but declaring that it reads the next block's rows (as KLASS does)."""

    needs_rows_beyond_block = True

    def step(self, state):
        self.seen.append(None if state.beyond is None else tuple(state.beyond.shape))
        return super().step(state)


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", CACHES)
def test_rows_beyond_the_block_only_for_decoders_that_declare_them(cache, shift):
    L, blocks = 4, 3
    cfg = GenerationConfig(gen_length=L * blocks, block_length=L, cache=cache)
    plain_engine, plain = _engine(shift=shift)
    events = []
    base = plain_engine.generate([PROMPTS[0]], build("confidence", {"tau": "0.3"}), cfg, trace=events.append)[0]
    # a plain confidence forward computes the block's rows and nothing else: each block-opening
    # forward L rows, every later forward the L - shift rows not committed at the opening
    assert len(plain.logits_rows) == base.nfe == plain.calls
    assert plain.logits_rows.count(L) == (blocks if shift else base.nfe) and set(plain.logits_rows) == {L, L - shift}
    reading_engine, reading = _engine(shift=shift)
    decoder = ConfidenceReadingBeyond(Confidence.Params(tau=0.3))
    decoder.seen = []
    out = reading_engine.generate([PROMPTS[0]], decoder, cfg)[0]
    # the next block's rows change nothing else: same tokens, same forwards
    assert (out.tokens, out.nfe, reading.calls) == (base.tokens, base.nfe, plain.calls)
    # every forward of every block but the last computes L more rows: the next block's
    extra = [a - b for a, b in zip(reading.logits_rows, plain.logits_rows)]
    last = 1 + sum(1 for e in events if e["block"] == blocks - 1 and e["forward"] is not None)  # its forwards
    assert extra == [L] * (len(extra) - last) + [0] * last and 0 < last
    assert set(decoder.seen[:-1]) >= {(L, V)} and decoder.seen[-1] is None


TINY_DECODERS = DECODERS + [("eb_sampler", {"gamma": "2.5", "order": "confidence"}),
                            ("klass", {"tau": "0.2", "kappa": "1.0"}), ("wino", {"tau1": "0.2", "tau2": "0.5"}),
                            ("rps", {}), ("rps", {"tau_pivot": "0.3", "k_max": "5", "r": "0.05"}),
                            ("rps", {"tau_pivot": "0.3", "k_max": "5", "r": "0.05", "carry": "false"})]


@pytest.fixture(scope="module", params=["llada-tiny", "dream-tiny", "llada2-tiny", "sdar-tiny"])
def tiny(request, golden):
    from ripple.platform.runtime.loading import load_model

    return load_model(str(golden / request.param), "float32", "cpu")


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name,settings", TINY_DECODERS)
def test_invariants_on_the_tiny_models(tiny, name, settings, cache):
    """Every decoder with every cache policy on every family's golden checkpoint (ripple.testing). Two
    blocks of 4 (the prompts' tails in the first on the block-causal families): every rule and cache
    crosses a block boundary at about half the forwards of two blocks of 8."""
    check_decoder_on_model(lambda: decoder(name, settings, block_length=4), tiny, caches=[cache], gen_length=8,
                           block_length=4)


# decoders that follow a reference (the oracle; a plugin's too), each built following a registered decoder
FOLLOWERS = [name for name in decoders_for("mask") if get(name).follows_reference]


@pytest.fixture(scope="module", params=["llada-tiny", "dream-tiny", "llada2-tiny", "sdar-tiny", "fast-dllm-v2-tiny",
                                        "ripple-tiny", "ripple-tiny-bd", "ripple-tiny-lines"])
def checkpoint(request, golden):
    from ripple.platform.runtime.loading import load_model

    name = request.param
    return name, load_model(name if name.startswith("ripple-") else str(golden / name), "float32", "cpu")


@pytest.mark.parametrize("name", FOLLOWERS)
def test_a_follower_writes_the_followed_decoders_tokens_on_every_checkpoint_and_cache(checkpoint, name):
    """ripple.testing.check_follower: following default and confidence, under every cache, each sample's tokens
    are the followed decoder's, its NFE counts its own forwards only and, following default, is at most
    default's (the five golden mask checkpoints and the three embedded models)."""
    model, lm = checkpoint
    make = lambda follow: build(name, {"follow": follow})  # noqa: E731
    check_follower(make, lm, gen_length=8, block_length=4, prompts=((12, 40, 77, 3, 90), (5, 9, 33)))
    if model == "fast-dllm-v2-tiny":  # its sub-blocks: a follower commits inside the current one
        check_follower(make, lm, gen_length=8, block_length=4, sub_block_length=2, prompts=((12, 40, 77, 3, 90),))


@pytest.fixture(scope="module")
def gemma(golden):
    from ripple.platform.runtime.loading import load_model

    return load_model(str(golden / "diffusion-gemma-tiny"), "float32", "cpu")


RENOISING = [(name, {}) for name in decoders_for("uniform")] + [
    ("renoise", {"steps": "6", "entropy_bound": "2.0", "confidence": "1.5", "t_max": "0.3", "t_min": "0.1"}),
    ("renoise", {"steps": "4", "stability": "0", "confidence": "9.0"})]


@pytest.mark.parametrize("cache", ["prefix", "none"])
@pytest.mark.parametrize("name,settings", RENOISING)
def test_renoising_invariants(gemma, name, settings, cache):
    """Every renoising decoder on diffusion-gemma-tiny: no canvas holds a mask id (the family has none:
    every token is a vocabulary id), a canvas ends within the decoder's bound of forwards, NFE equals the
    model calls made (decoder forwards and encoder passes), a seed decides the tokens, and a batch with
    other seeds equals single runs. Two canvases of 4: the second reads the first through the encoder."""
    check_renoising_decoder(lambda: decoder(name, settings), gemma, caches=[cache], gen_length=8)
