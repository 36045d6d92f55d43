"""Token editing (LLaDA2.1's Token-to-Token rule) as the engine runs it for every decoder that
declares it: the shared invariants on a scripted model and on llada2-tiny, RPS with editing on a
scripted model, bad values, and decoders with editing off unchanged."""
import json

import pytest
import torch

from ripple.cli import main
from ripple.decoders import Plan, build
from ripple.decoders.base import Commit
from ripple.decoders.confidence import Confidence
from ripple.errors import RippleError
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import CountedModel as Counted
from tests.decoders.test_invariants import CACHES, MASK, PROMPTS, V, _engine
from tests.decoders.test_invariants import SHIFTS as FAMILIES
from ripple.testing import ScriptedModel, hashed_script, view

EDITING = [("confidence", {"tau": "0.5", "edit_tau": "0.3", "max_post_steps": "3"}),
           ("confidence", {"tau": "0.7", "edit_tau": "0.0", "max_post_steps": "2", "k": "2"}),
           ("confidence", {"tau": "0.9", "edit_tau": "0.5", "max_post_steps": "0"}),
           ("rps", {"tau_pivot": "0.3", "edit_tau": "0.2", "max_post_steps": "2"}),
           ("rps", {"tau_pivot": "0.3", "edit_tau": "0.2", "max_post_steps": "2", "carry": "false"})]


def check_editing(out, events, calls, *, block_length, lead, mask, max_post, fixed_first=False):
    """Edits only at positions of the current block that earlier decisions of that block wrote (never
    the prompt's tail, a position committed at the opening or in the same decision, or another
    block), never the mask id, blocks end unmasked, at most `max_post` post forwards per block, NFE
    equals the forwards run; returns the number of edits."""
    L = block_length
    assert mask not in out.tokens
    assert out.nfe == calls
    written: dict[int, set[int]] = {}  # block -> positions decoded so far
    fixed: dict[int, set[int]] = {}
    post_forwards: dict[int, int] = {}
    full: dict[int, bool] = {}
    n_edits = 0
    for e in events:
        b = e["block"]
        lo, hi = max(0, L * b - lead), L * (b + 1) - lead  # the block's response positions
        done = written.setdefault(b, set())
        committed = [p for p, _ in e["committed"]]
        if e["phase"] == "open":
            fixed.setdefault(b, set()).update(committed)
        for p, old, new in e.get("edited", []):
            assert lo <= p < hi, e
            assert p in done and p not in committed, e
            assert p not in fixed.get(b, set()), e
            assert new != mask and new != old, e
            n_edits += 1
        assert all(lo <= p < hi and p not in done for p in committed), e
        done.update(committed)
        if e["forward"] is not None and len(done) == hi - lo:
            post_forwards[b] = post_forwards.get(b, 0) + 1  # a forward on a full block
        full[b] = len(done) == hi - lo
    assert all(full.values())
    assert all(n <= max_post for n in post_forwards.values()), post_forwards
    assert n_edits == out.edits
    return n_edits


@pytest.mark.parametrize("shift", FAMILIES)
@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("name,settings", EDITING)
def test_editing_invariants_on_a_scripted_model(name, settings, cache, shift):
    engine, model = _engine(hashed_script(V), shift=shift)
    events = []
    cfg = GenerationConfig(gen_length=12, block_length=4, cache=cache)
    out = engine.generate([PROMPTS[0]], build(name, settings), cfg, trace=events.append)[0]
    lead = 1 if shift == "bc" else 0  # a prompt of 5 in blocks of 4: its last token opens the first block
    check_editing(out, events, model.calls, block_length=4, lead=lead, mask=MASK,
                  max_post=int(settings["max_post_steps"]))
    # a batch of prompts gives every row's single-run tokens, NFE and edits
    batch = _engine(hashed_script(V), shift=shift)[0].generate(PROMPTS, build(name, settings), cfg)
    singles = [_engine(hashed_script(V), shift=shift)[0].generate([p], build(name, settings), cfg)[0]
               for p in PROMPTS]
    assert [(b.tokens, b.nfe, b.edits) for b in batch] == [(s.tokens, s.nfe, s.edits) for s in singles]


def test_the_scripted_runs_do_edit_and_run_post_forwards():
    """The invariant runs above are not vacuous: edits happen, in fill and in post steps."""
    phases = set()
    for name, settings in EDITING:
        for shift in FAMILIES:
            engine, _ = _engine(hashed_script(V), shift=shift)
            events = []
            engine.generate([PROMPTS[0]], build(name, settings), GenerationConfig(12, 4), trace=events.append)
            phases |= {e["phase"] for e in events if e.get("edited")}
    assert phases == {"step", "post"}


@pytest.mark.parametrize("name,settings", EDITING)
def test_prefix_equals_none_in_tokens_with_editing(name, settings):
    cfg = lambda cache: GenerationConfig(gen_length=12, block_length=4, cache=cache)  # noqa: E731
    for shift in FAMILIES:
        none = _engine(hashed_script(V), shift=shift)[0].generate(PROMPTS, build(name, settings), cfg("none"))
        prefix = _engine(hashed_script(V), shift=shift)[0].generate(PROMPTS, build(name, settings), cfg("prefix"))
        assert [o.tokens for o in none] == [o.tokens for o in prefix]


@pytest.fixture(scope="module")
def llada2(golden):
    from ripple.platform.runtime.loading import load_model

    return load_model(str(golden / "llada2-tiny"), "float32", "cpu")


@pytest.mark.slow
@pytest.mark.parametrize("name,settings", EDITING + [("confidence", {"tau": "0.5", "edit_tau": "0.0",
                                                                     "max_post_steps": "16"})])
def test_editing_invariants_on_llada2_tiny(llada2, name, settings):
    prompts = [[12, 40, 77, 3, 90, 15], [5, 9, 33, 60, 61, 62, 63, 64, 65, 66, 67]]
    L = 8
    tokens = {}
    for cache in CACHES:
        def engine():
            model = Counted(llada2.model)
            return Engine(model, mask_id=llada2.mask_id, eos_ids=llada2.eos_ids, pad_id=llada2.pad_id), model

        # one block's worth of response: after each prompt's tail (6 and 3 tokens) it spans two blocks
        cfg = GenerationConfig(gen_length=L, block_length=L, cache=cache)
        singles = []
        for p in prompts:
            eng, model = engine()
            events = []
            out = eng.generate([p], build(name, settings), cfg, trace=events.append)[0]
            check_editing(out, events, model.calls, block_length=L, lead=len(p) % L, mask=llada2.mask_id,
                          max_post=int(settings["max_post_steps"]))
            singles.append(out)
        batch = engine()[0].generate(prompts, build(name, settings), cfg)
        assert [(b.tokens, b.nfe, b.edits) for b in batch] == [(s.tokens, s.nfe, s.edits) for s in singles]
        tokens[cache] = [s.tokens for s in singles]
    assert tokens["none"] == tokens["prefix"] == tokens["dual"]


# RPS with editing on a scripted model: prompt 4 tokens, one block of 4 (positions 4..7)
RV, RMASK = 20, 19


def _pivot_script(edit_after_pivot: bool):
    """Position 4 is sure of 10; position 5 (the pivot) hesitates between 11 and 12; 6 and 7 are
    spread unless 5 holds 11, then sure of 14 and 15. A decoded position predicts its own token,
    except position 4 once 5 holds 11: then it prefers 13 when `edit_after_pivot`."""

    def script(pos, seen):
        canvas, _ = view(seen, RMASK)
        logits = torch.full((RV,), -30.0)
        five = canvas.get(5)
        if pos == 4 and canvas.get(4) != RMASK and five == 11 and edit_after_pivot:
            logits[13] = 10.0
        elif canvas.get(pos, RMASK) != RMASK:
            logits[canvas[pos]] = 10.0  # a decoded position keeps its token
        elif pos == 4:
            logits[10] = 10.0
        elif pos == 5:
            logits[11], logits[12] = 2.0, 1.8
        elif five == 11:
            logits[14 if pos == 6 else 15] = 10.0
        else:
            logits[2:RMASK] = 0.0  # spread: top-10 mass about 0.53, never a pivot
        return logits

    return script


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("edit_after_pivot", [True, False])
def test_rps_edit_reads_the_winning_variants_distributions(cache, edit_after_pivot):
    model = ScriptedModel(RV, _pivot_script(edit_after_pivot))
    engine = Engine(model, mask_id=RMASK, eos_ids=[1], pad_id=0)
    events = []
    dec = build("rps", {"edit_tau": "0.5", "max_post_steps": "2"})
    out = engine.generate([[5, 6, 7, 8]], dec, GenerationConfig(4, 4, cache=cache), trace=events.append)[0]
    first, resolve = events[0], events[1]
    assert first["committed"] == [[0, 10]] and first["pivot"] == 1 and first["forward"] == "lookahead"
    assert resolve["phase"] == "resolve" and resolve["chosen"] == 11
    # the next step reads the winner's distributions (5 = 11), where position 4 prefers 13 when scripted
    # so; the anchor's (5 masked) keep 10, so an edit can only come from the carried variant
    after = events[2]
    assert sorted(after["committed"]) == [[2, 14], [3, 15]]
    if edit_after_pivot:
        assert after["edited"] == [[0, 10, 13]] and out.tokens == (13, 11, 14, 15) and out.edits == 1
    else:
        assert "edited" not in after and out.tokens == (10, 11, 14, 15) and out.edits == 0
    # opening, lookahead, then one post forward that edits nothing and ends the block
    assert [e["phase"] for e in events] == ["step", "resolve", "step", "post"]
    assert "edited" not in events[3] and out.nfe == model.calls == 3


def test_rps_and_confidence_at_editing_defaults_are_unchanged():
    """edit_tau 1.0 and max_post_steps 0 (the defaults) are today's decoders: same tokens, NFE, and
    trace as with the parameters left out, on every family and cache."""
    for name in ("confidence", "rps"):
        for shift in FAMILIES:
            for cache in CACHES:
                cfg = GenerationConfig(gen_length=12, block_length=4, cache=cache)
                a, b = [], []
                out_a = _engine(shift=shift)[0].generate(PROMPTS, build(name, {}), cfg, trace=a.append)
                out_b = _engine(shift=shift)[0].generate(
                    PROMPTS, build(name, {"edit_tau": "1.0", "max_post_steps": "0"}), cfg, trace=b.append)
                assert [(o.tokens, o.nfe, o.edits) for o in out_a] == [(o.tokens, o.nfe, 0) for o in out_b]
                assert a == b and not any("edited" in e or e["phase"] == "post" for e in a)


def test_an_edit_outside_the_rules_is_a_protocol_error():
    class Undeclared(Confidence):  # edits without declaring edits_tokens
        edits_tokens = False

        def step(self, state):
            plan = super().step(state)
            return Plan(plan.commit, edit=Commit(torch.tensor([0]), torch.tensor([7])))

    with pytest.raises(RippleError, match="planned token edits but does not declare edits_tokens"):
        _engine()[0].generate([PROMPTS[0]], Undeclared(), GenerationConfig(8, 4))

    def editor(pick):
        class Bad(Confidence):
            def step(self, state):
                plan = super().step(state)
                return Plan(plan.commit, edit=pick(state, plan))
        return Bad(Confidence.Params(tau=0.99, edit_tau=0.5))  # one commit per step

    bad = {
        "edited a masked position": lambda st, plan: Commit(st.masked.nonzero()[:1, 0], torch.tensor([7])),
        "edited a token to the mask id": lambda st, plan: Commit((~st.masked).nonzero()[:1, 0], torch.tensor([MASK]))
        if bool((~st.masked).any()) else Commit(),
        "edited outside the current block": lambda st, plan: Commit(torch.tensor([4]), torch.tensor([7])),
    }
    for message, pick in bad.items():
        with pytest.raises(RuntimeError, match=message):
            _engine(hashed_script(V))[0].generate([PROMPTS[0]], editor(pick), GenerationConfig(8, 4))
    # the prompt's tail in a block-aligned family's first block is fixed: never edited
    with pytest.raises(RuntimeError, match="edited a fixed position"):
        _engine(hashed_script(V), shift="bc")[0].generate(
            [PROMPTS[0]], editor(lambda st, plan: Commit(torch.tensor([0]), torch.tensor([7]))
                                 if st.block_index == 0 and bool(st.fixed[0]) else Commit()), GenerationConfig(8, 4))


@pytest.mark.parametrize("decoder,settings,message", [
    ("rps", "edit_tau=1.5", "edit_tau=1.5 is invalid; accepted: float in [0.0, 1.0]"),
    ("confidence", "edit_tau=-0.1", "edit_tau=-0.1 is invalid; accepted: float in [0.0, 1.0]"),
    ("confidence", "max_post_steps=-1", "max_post_steps=-1 is invalid; accepted: int in [0, inf]"),
    ("rps", "max_post_steps=-2", "max_post_steps=-2 is invalid; accepted: int in [0, inf]"),
    ("confidence", "k=0", "k=0 is invalid; accepted: int in [1, inf]"),
])
def test_bad_editing_values_are_one_line_and_exit_2(golden, capsys, decoder, settings, message):
    code = main(["generate", "--model", str(golden / "llada2-tiny"), "--input-ids", "1,2,3", "--decoder", decoder,
                 "--set", settings, "--gen-length", "8", "--block-length", "8"])
    err = capsys.readouterr()
    assert code == 2 and message in err.err and err.err.count("\n") == 1 and not err.out


@pytest.mark.parametrize("cache", CACHES)
def test_rps_with_editing_runs_on_llada2_tiny(golden, capsys, cache):
    assert main(["generate", "--model", str(golden / "llada2-tiny"), "--input-ids", "51,109,11,50,61,38,2,148,115",
                 "--decoder", "rps", "--set", "edit_tau=0.3", "--set", "max_post_steps=4", "--set", "tau_pivot=0.3",
                 "--gen-length", "32", "--block-length", "8", "--cache", cache, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"]["edit_tau"] == 0.3 and out["nfe"] >= 4 and out["lookahead_nfe"] >= 1 and out["edits"] >= 1
