"""Properties every decoder must satisfy (DESIGN.md section 4), on a scripted model."""
import json
import tempfile
from pathlib import Path

import pytest
import torch

from ripple.decoders import build, decoders_for, names
from ripple.decoders.confidence import Confidence
from ripple.platform.runtime.engine import Engine, GenerationConfig
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
    """shift 0 / 1: a LLaDA- / Dream-like family; "bc": block-causal (LLaDA2's block diffusion)."""
    model = ScriptedModel(V, script or mask_loving_script(V), shift=int(shift == 1), block_causal=shift == "bc")
    return Engine(model, mask_id=MASK, eos_ids=[EOS], pad_id=0), model


FAMILIES = [0, 1, "bc"]


# every registered decoder of mask families (the scripted model is one; by the declared `noise`) at its
# defaults (a new decoder module is tested without editing this file), plus settings that make the rules
# act on this scripted model. Renoising decoders: test_renoising_invariants below, on diffusion-gemma-tiny.
DECODERS = [(name, {}) for name in decoders_for("mask")] + [
    ("confidence", {"tau": "0.3"}), ("confidence", {"factor": "1.0"}),
    ("klass", {"tau": "0.2", "kappa": "50.0", "H": "1"}), ("eb_sampler", {"gamma": "3.0"}),
    ("wino", {"tau1": "0.2", "tau2": "0.95"}), ("lopa", {"tau": "0.5", "branches": "3"}),
    ("rps", {"tau_pivot": "0.3", "pivot": "max_entropy"}),
    ("dinfer_threshold", {"tau": "0.3"}), ("hierarchy", {"tau": "0.5", "low_tau": "0.1"}),
    ("credit", {"tau": "0.3", "alpha": "1.5", "gamma": "0.5", "beta": "0.5"}),
    ("pc_sampler", {"lambda": "0.5", "alpha": "2.0"}), ("dus", {"base": "2", "remask_tau": "0.3"}),
    ("slow_fast", {"explore_steps": "2", "span_tau": "0.2", "fill_tau": "0.3"})]

# data a decoder reads from files (PC-Sampler's token-frequency prior): one that fits every vocabulary here
PRIOR = Path(tempfile.mkdtemp(prefix="ripple-prior-")) / "prior.json"
PRIOR.write_text(json.dumps({"num_token": 1000, "p_baseline_dict": {str(i): 30 + i for i in range(3, 30)}}))
DATA = {"pc_sampler": {"prior": str(PRIOR)}}


def decoder(name, settings):
    """`build`, with the data files a decoder needs when the settings name none."""
    return build(name, {**DATA.get(name, {}), **settings})


@pytest.mark.parametrize("shift", FAMILIES)
@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name,settings", DECODERS)
def test_invariants(name, settings, cache, shift):
    engine, model = _engine(shift=shift)
    events = []
    cfg = GenerationConfig(gen_length=12, block_length=4, cache=cache)
    out = engine.generate([PROMPTS[0]], decoder(name, settings), cfg, trace=events.append)[0]
    if shift == "bc":  # prompt of 5: blocks from position 4, the first holding its last token; at most 4 blocks
        check_invariants(out, events, model.calls, blocks=None, block_length=4, shift=0, lead=1, max_blocks=4)
    else:
        check_invariants(out, events, model.calls, blocks=3, block_length=4, shift=shift)
    again = _engine(shift=shift)[0].generate([PROMPTS[0]], decoder(name, settings), cfg)[0]
    assert again.tokens == out.tokens and again.nfe == out.nfe  # deterministic


def check_invariants(out, events, calls, *, blocks, block_length, shift, mask=MASK, lead=0, max_blocks=None,
                     eos=(EOS,)):
    """The shared properties of one decoded sample, from its output and decode trace.

    Block-aligned families: `lead` prompt tokens sit at the start of the first block (trace
    positions count from the response start), and a block-end EOS stop may decode fewer than
    `max_blocks` blocks (blocks=None: as many as the trace shows)."""
    L = block_length
    if blocks is None:
        blocks = len({e["block"] for e in events})
        assert 1 <= blocks <= max_blocks and sorted({e["block"] for e in events}) == list(range(blocks))
        if blocks < max_blocks:  # stopped early: only after a block that left an EOS in the response
            assert set(eos) & set(out.tokens)
    assert mask not in out.tokens  # every block ends unmasked, the mask id is never committed
    assert out.nfe == calls  # NFE counts exactly the forwards run
    opens = [e for e in events if e["phase"] == "open"]
    steps = [e for e in events if e["phase"] == "step"]
    fills = [e for e in events if e["phase"] == "fill"]  # blocks a decoder ended with masks (`Plan.defer`)
    # shifted families: the block opening commits the block's first position, nothing else does
    assert [[p for p, _ in e["committed"]] for e in opens] == ([[L * b] for b in range(blocks)] if shift else [])
    for e in steps + opens + fills:  # commits (and remasks) only inside the current block (never the prompt's tail)
        for p in [p for p, _ in e["committed"]] + e.get("remasked", []):
            assert max(0, L * e["block"] - lead) <= p < L * (e["block"] + 1) - lead
    assert len({e["block"] for e in fills}) == len(fills)  # at most one fill forward per block
    for b in range(blocks):  # progress: after t steps of a block at least t tokens net committed
        if any(e["block"] == b for e in fills):
            continue  # a fixed schedule that ended the block with masks (its positions were taken back)
        net = 0
        for t, e in enumerate([e for e in steps if e["block"] == b], 1):
            net += len(e["committed"]) - len(e.get("remasked", []))
            assert net >= t, e
    # no forward once a block is complete: one opening forward per block, then exactly one forward
    # per step (and per shifted opening commit) except the one that completes the block, plus one
    # per block filled after the last
    run = [e for e in steps + opens if e["forward"] is not None]
    assert out.nfe == blocks + len(run) + len(fills)
    assert sum(e["forward"] is None for e in steps + opens) == blocks


@pytest.mark.parametrize("shift", FAMILIES)
@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name,settings", DECODERS)
def test_batch_equals_single_runs(name, settings, cache, shift):
    cfg = GenerationConfig(gen_length=8, block_length=4, cache=cache)
    batch_engine, model = _engine(shift=shift)
    batch = batch_engine.generate(PROMPTS, decoder(name, settings), cfg)
    singles = [_engine(shift=shift)[0].generate([p], decoder(name, settings), cfg)[0] for p in PROMPTS]
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


class Counted:
    """A loaded model that counts its forward calls (the engine reads its family facts through it)."""

    def __init__(self, model):
        self.model, self.calls = model, 0

    def __getattr__(self, name):  # every family property (shift, block_causal, ...) is the model's
        return getattr(self.model, name)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.model(*args, **kwargs)


TINY_DECODERS = DECODERS + [("eb_sampler", {"gamma": "2.5", "order": "confidence"}),
                            ("klass", {"tau": "0.2", "kappa": "1.0"}), ("wino", {"tau1": "0.2", "tau2": "0.5"}),
                            ("rps", {}), ("rps", {"tau_pivot": "0.3", "k_max": "5", "r": "0.05"})]


@pytest.fixture(scope="module", params=["llada-tiny", "dream-tiny", "llada2-tiny", "sdar-tiny"])
def tiny(request, golden):
    from ripple.platform.runtime.loading import load_model

    return load_model(str(golden / request.param), "float32", "cpu")


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name,settings", TINY_DECODERS)
def test_invariants_on_the_tiny_models(tiny, name, settings, cache):
    """Every decoder with every cache policy on every family's golden checkpoint."""
    prompts = [[12, 40, 77, 3, 90, 15], [5, 9, 33]]
    cfg = GenerationConfig(gen_length=16, block_length=8, cache=cache)

    def engine():
        model = Counted(tiny.model)
        return Engine(model, mask_id=tiny.mask_id, eos_ids=tiny.eos_ids, pad_id=tiny.pad_id), model

    singles = []
    for p in prompts:
        eng, model = engine()
        events = []
        out = eng.generate([p], decoder(name, settings), cfg, trace=events.append)[0]
        if tiny.model.block_causal:  # LLaDA2, SDAR: blocks from position 0, the prompt's tail in the first one
            check_invariants(out, events, model.calls, blocks=None, block_length=8, shift=0, mask=tiny.mask_id,
                             lead=len(p) % 8, max_blocks=3, eos=tiny.eos_ids)
        else:
            check_invariants(out, events, model.calls, blocks=2, block_length=8, shift=tiny.shift, mask=tiny.mask_id)
        singles.append(out)
    batch = engine()[0].generate(prompts, decoder(name, settings), cfg)  # also: greedy decoding is deterministic
    assert [(b.tokens, b.nfe) for b in batch] == [(s.tokens, s.nfe) for s in singles]


class CountedGemma:
    """A uniform-noise model that counts its decoder forwards and encoder passes per row."""

    def __init__(self, model):
        self.model, self.decodes, self.encodes = model, 0, 0
        self.noise, self.family, self.vocab_size = model.noise, model.family, model.vocab_size

    def encode(self, ids, *args, **kwargs):
        self.encodes += ids.shape[0]
        return self.model.encode(ids, *args, **kwargs)

    def decode(self, canvas, *args, **kwargs):
        self.decodes += canvas.shape[0]
        return self.model.decode(canvas, *args, **kwargs)


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
    other seeds equals single runs."""
    from ripple.decoders import get

    bound = get(name)(get(name).Params.from_strings(name, settings)).max_canvas_forwards

    def run(prompts, seeds, events=None):
        model = CountedGemma(gemma.model)
        engine = Engine(model, mask_id=gemma.mask_id, eos_ids=gemma.eos_ids, pad_id=gemma.pad_id)
        outs = engine.generate(prompts, decoder(name, settings), GenerationConfig(12, 4, cache, block_aligned=True),
                               trace=None if events is None else events.append, seeds=seeds)
        return outs, model

    prompts, seeds = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19]], [3, 4, 5]
    singles = []
    for p, s in zip(prompts, seeds):
        events = []
        (out,), model = run([p], [s], events)
        assert engine_mask_free(out, events, gemma.model.vocab_size)
        steps = [e for e in events if e["phase"] == "step"]
        for k in {e["canvas"] for e in steps}:
            n = [e for e in steps if e["canvas"] == k]
            assert 1 <= len(n) <= bound and [e["end"] for e in n] == [False] * (len(n) - 1) + [True]
        assert out.nfe == model.decodes + model.encodes and out.encoder_nfe == model.encodes
        assert len(steps) == model.decodes and out.encoder_nfe == sum(e["phase"] == "encode" for e in events)
        again = run([p], [s])[0][0]
        assert again.tokens == out.tokens and again.nfe == out.nfe  # deterministic for a seed
        singles.append(out)
    batch, model = run(prompts, seeds)
    assert [b.tokens for b in batch] == [s.tokens for s in singles]
    assert [b.nfe for b in batch] == [s.nfe for s in singles]
    assert model.decodes + model.encodes == sum(s.nfe for s in singles)  # a finished row is not forwarded


def engine_mask_free(out, events, vocab: int) -> bool:
    """Every canvas the engine fed and every emitted token is a vocabulary id (never a mask: there is none)."""
    fed = [t for e in events if e["phase"] == "step" for t in e["input"] + e["argmax"]]
    return all(0 <= t < vocab for t in fed + list(out.tokens))
