"""Every branch of RPS (Algorithm 1), pinned on constructed distributions and a scripted model."""
import math

import pytest
import torch

from ripple.decoders import build
from ripple.decoders.base import BlockState, Lookahead
from ripple.decoders.rps import entropy
from ripple.errors import RippleError
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import ScriptedModel, hashed_script, view

V, MASK = 40, 39


def state(rows, tokens=None):
    """A block whose masked positions have the given distributions ({token: prob} per row)."""
    L = len(rows)
    probs = torch.full((L, V), 1e-12, dtype=torch.float64)
    for i, row in enumerate(rows):
        rest = 1.0 - sum(row.values())
        probs[i, 20:39] = rest / 19  # spread remaining mass over tokens 20..38
        for tok, p in row.items():
            probs[i, tok] = p
    logits = probs.log().float()
    toks = torch.full((L,), MASK) if tokens is None else torch.tensor(tokens)
    return BlockState(toks, logits, MASK, 0)


def rps(**kw):
    return build("rps", {k: str(v) for k, v in kw.items()})


PIVOTY = {1: 0.5, 2: 0.3, 3: 0.15}  # mass 0.95 in three tokens: a feasible mid-entropy position
CONFIDENT = {4: 0.97}
FLAT = {5: 0.1}  # top-10 mass far below tau_pivot


def test_standard_commit_comes_first_and_lookahead_runs_on_the_committed_canvas():
    st = state([CONFIDENT, PIVOTY, PIVOTY, FLAT])
    plan = rps(tau=0.9, tau_pivot=0.9).step(st)
    assert plan.commit.positions.tolist() == [0] and plan.commit.tokens.tolist() == [4]
    assert plan.info["pivot"] == 1  # tie on truncated entropy between 1 and 2 -> lower index
    assert plan.variants is not None
    assert (plan.variants[:, 0] == 4).all()  # S is committed in every branch
    assert plan.variants[:, 1].tolist() == [1, 2, 3]  # candidates in descending probability
    assert (plan.variants[:, 2:] == MASK).all()


def test_no_pivot_search_when_fewer_than_two_positions_remain():
    plan = rps(tau=0.9, tau_pivot=0.5).step(state([CONFIDENT, CONFIDENT, PIVOTY]))
    assert plan.variants is None and len(plan.commit) == 2
    assert plan.info["why"] == "fewer than 2 masked"


def test_no_pivot_search_when_no_position_reaches_tau_pivot():
    plan = rps(tau_pivot=0.9).step(state([FLAT, FLAT, FLAT]))
    assert plan.variants is None and plan.info["why"] == "no position reaches tau_pivot"
    assert len(plan.commit) == 1  # the top-1 fallback of the standard rule


def test_no_pivot_search_when_at_most_one_token_passes_r():
    lonely = {1: 0.85, 2: 0.05}  # 0.05 < 0.1 * 0.85
    plan = rps(tau_pivot=0.85, r=0.1).step(state([CONFIDENT, lonely, FLAT]))
    assert plan.info["pivot"] == 1
    assert plan.variants is None and plan.info["why"] == "one candidate"
    plan = rps(tau_pivot=0.85, r=0.05).step(state([CONFIDENT, lonely, FLAT]))  # now 0.05 >= 0.0425 passes
    assert plan.variants[:, 1].tolist() == [1, 2]


def test_pivot_maximises_truncated_entropy_among_feasible_positions():
    low = {1: 0.9, 2: 0.06}  # feasible, low entropy
    mid = {1: 0.4, 2: 0.35, 3: 0.2}  # feasible, highest truncated entropy
    high = {1: 0.3, 2: 0.3}  # higher entropy but only 0.6 + spread mass in its top-10: infeasible at 0.9
    st = state([low, high, mid, FLAT])
    plan = rps(tau=0.99, tau_pivot=0.9).step(st)
    assert plan.info["pivot"] == 2
    probs = st.probs[2]
    top = probs.topk(10).values
    assert plan.info["pivot_entropy"] == pytest.approx(float(-(top * top.log()).sum()))
    plan = rps(tau=0.99, tau_pivot=0.6).step(st)  # with a looser mass bound the high-entropy one wins
    assert plan.info["pivot"] == 1


def test_candidate_order_and_k_max_cap():
    many = {1: 0.3, 2: 0.25, 3: 0.2, 6: 0.15, 7: 0.08}
    st = state([CONFIDENT, many, FLAT])
    plan = rps(tau_pivot=0.9, k_max=10, r=0.1).step(st)
    assert plan.info["pivot"] == 1
    assert plan.variants[:, 1].tolist() == [1, 2, 3, 6, 7]
    plan = rps(tau_pivot=0.5, k_max=3, r=0.1).step(st)
    assert plan.variants[:, 1].tolist() == [1, 2, 3]
    plan = rps(tau_pivot=0.5, k_max=10, r=0.45).step(st)
    assert plan.variants[:, 1].tolist() == [1, 2, 3, 6]  # 0.15 >= 0.45 * 0.3 > 0.08


def _dist(peak_tok, peak):
    p = torch.full((V,), (1 - peak) / (V - 1), dtype=torch.float64)
    p[peak_tok] = peak
    return p


def _lookahead_case():
    """Standard commit at 0, pivot at 1 with candidates [1, 2]; downstream position 2 gets
    sharper under token 1. The canvas then holds the standard commit, as in the engine."""
    st = state([CONFIDENT, {1: 0.6, 2: 0.35}, FLAT])
    plan = rps(tau_pivot=0.9, r=0.1, **{"lambda": 0.2}).step(st)
    assert plan.info["pivot"] == 1 and plan.variants[:, 1].tolist() == [1, 2]
    st.tokens[plan.commit.positions] = plan.commit.tokens
    committed = _dist(4, 0.99)
    pivot = _dist(2, 0.55)
    pivot[1] = 0.3  # after the standard commit the anchor prefers token 2; token 1 is less plausible
    pivot /= pivot.sum()
    anchor = torch.stack([committed, pivot, _dist(9, 0.3)])  # [L, V]
    var1 = torch.stack([committed, _dist(1, 0.6), _dist(9, 0.95)])  # token 1 at the pivot: downstream sharp
    var2 = torch.stack([committed, _dist(2, 0.6), _dist(9, 0.2)])  # token 2: downstream blurrier than MASK
    look = Lookahead(anchor.log().float(), torch.stack([var1, var2]).log().float())
    return st, plan, look


def _margin_lambda(st, plan, look, token_index):
    """lambda at which token candidate `token_index` ties with MASK (Proposition 2's margin)."""
    ap = torch.softmax(look.anchor.double(), -1)
    vp = torch.softmax(look.variants.double(), -1)
    h_tok = float(entropy(vp[token_index, 2]))
    h_mask = float(entropy(ap[2]))
    a_tok = float(ap[1, plan.variants[token_index, 1]])
    a_mask = float(ap[1].max())
    return (h_mask - h_tok) / math.log(a_mask / a_tok)


@pytest.mark.parametrize("side,expect", [(0.99, 1), (1.01, "MASK")])
def test_mask_wins_exactly_when_no_entropy_gain_covers_the_plausibility_deficit(side, expect):
    st, plan, look = _lookahead_case()
    # token 2 is as plausible as MASK but leaves more entropy, so it never wins: token 1 is the contender
    lam_star = _margin_lambda(st, plan, look, 0)
    assert lam_star > 0
    decoder = rps(tau_pivot=0.9, r=0.1, **{"lambda": lam_star * side})
    res = decoder.resolve(st, plan, look)
    assert res.info["chosen"] == expect
    if expect == "MASK":
        assert len(res.commit) == 0
        assert torch.equal(res.logits, look.anchor)  # the anchor's distributions are carried
    else:
        assert res.commit.positions.tolist() == [1] and res.commit.tokens.tolist() == [1]
        assert torch.equal(res.logits, look.variants[0])  # the winner's distributions are carried


def test_lambda_zero_picks_the_lowest_downstream_entropy_and_ties_go_to_the_earlier_candidate():
    st, plan, look = _lookahead_case()
    res = rps(tau_pivot=0.9, **{"lambda": 0.0}).resolve(st, plan, look)
    assert res.info["chosen"] == 1
    same = Lookahead(look.anchor, torch.stack([look.variants[0], look.variants[0]]))
    res = rps(tau_pivot=0.9, **{"lambda": 0.0}).resolve(st, plan, same)
    assert res.info["chosen"] == 1  # tie between both tokens -> earlier candidate
    table = res.info["candidates"]
    assert [c["token"] for c in table] == [1, 2, "MASK"]


def test_hyperparameters_are_validated():
    with pytest.raises(RippleError, match="tau_pivot=1.5 is invalid"):
        rps(tau_pivot=1.5)
    with pytest.raises(RippleError, match="k_max=0 is invalid"):
        rps(k_max=0)
    with pytest.raises(RippleError, match="lambda=-0.1 is invalid"):
        rps(**{"lambda": -0.1})


def _engine(shift=0, seed=0):
    model = ScriptedModel(V, hashed_script(V, scale=2.0, seed=seed), shift=shift)
    return Engine(model, mask_id=MASK, eos_ids=[1], pad_id=0), model


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_engine_loop_one_forward_per_iteration_and_carry(cache, shift):
    engine, model = _engine(shift)
    events = []
    out = engine.generate([[5, 6, 7, 8, 9]], rps(tau=0.9, tau_pivot=0.3, k_max=5, r=0.05),
                          GenerationConfig(16, 8, cache), trace=events.append)[0]
    assert out.nfe == model.calls  # NFE equals forwards run
    steps = [e for e in events if e["phase"] == "step"]
    resolves = [e for e in events if e["phase"] == "resolve"]
    assert out.lookahead_nfe == len(resolves) > 0  # the script makes pivots happen
    # at most one forward per loop iteration; none after a block empties
    opens = [e for e in events if e["phase"] == "open"]  # Dream: one opening commit per block
    assert len(opens) == (2 if shift else 0)
    assert out.nfe == 2 + sum(e["forward"] is not None for e in steps + opens)
    per_block_last = {}
    for e in steps:
        per_block_last[e["block"]] = e
    assert all(e["forward"] is None for e in per_block_last.values())
    # after a lookahead, the next step decides on carried distributions: no forward in between
    for i, e in enumerate(steps[:-1]):
        if e["forward"] == "lookahead":
            assert steps[i + 1]["block"] == e["block"]


def test_pivot_commit_and_abstention_both_occur_across_seeds():
    chosen = []
    for seed in range(6):
        engine, _ = _engine(seed=seed)
        events = []
        engine.generate([[5, 6, 7, 8]], rps(tau=0.9, tau_pivot=0.3, k_max=5, r=0.05, **{"lambda": 0.5}),
                        GenerationConfig(16, 8), trace=events.append)
        chosen += [e["chosen"] for e in events if e["phase"] == "resolve"]
    assert "MASK" in chosen and any(c != "MASK" for c in chosen)


def test_pivot_rule_ablation_selects_where_the_paper_says():
    low = {1: 0.9, 2: 0.06}  # feasible, the most confident remaining position
    mid = {1: 0.4, 2: 0.35, 3: 0.2}  # feasible, highest truncated entropy among feasible ones
    high = {1: 0.3, 2: 0.3}  # infeasible at tau_pivot 0.9 but the largest truncated entropy
    st = state([low, high, mid, FLAT])
    assert rps(tau=0.99, tau_pivot=0.9).step(st).info["pivot"] == 2  # truncated_entropy, the default
    h = entropy(st.probs[:, :39].topk(10).values)
    assert int(h.argmax()) == 3  # FLAT's spread top-10 is the most diffuse of all
    assert rps(tau=0.99, tau_pivot=0.9, pivot="max_entropy").step(st).info["pivot"] == 3  # no reachability filter
    # the forced commit takes `low` (position 0) first; of the rest, `second` is the most confident
    second = {1: 0.8, 2: 0.15}
    st = state([low, second, mid, FLAT])
    assert [rps(tau=0.99, tau_pivot=0.9, pivot=p).step(st).info["pivot"]
            for p in ("truncated_entropy", "max_entropy", "max_confidence")] == [2, 3, 1]
    with pytest.raises(RippleError, match="pivot='best'.*one of truncated_entropy, max_entropy, max_confidence"):
        rps(pivot="best")


def test_max_confidence_pivot_still_runs_a_lookahead_when_no_position_is_feasible():
    st = state([FLAT, {1: 0.5, 2: 0.4}, {1: 0.6, 2: 0.3}])  # position 2 is the forced commit
    assert rps(tau_pivot=0.99).step(st).info["why"] == "no position reaches tau_pivot"
    plan = rps(tau_pivot=0.99, pivot="max_confidence").step(st)
    assert plan.info["pivot"] == 1 and plan.variants[:, 1].tolist() == [1, 2]


# `carry` (issue 59): prompt 4 tokens, one block of 4 (positions 4..7)
CV, CMASK = 20, 19


def _carry_script(box: dict, mask_wins: bool = False):
    """Position 4 is sure of 10; position 5 (the pivot) hesitates between 11 and 12; 6 and 7 are spread
    unless 5 holds 11, then sure of 14 and 15 in the first two forwards (opening, lookahead: the carried
    variant's rows) and of 16 and 17 in any later one, so a step that commits 16 and 17 read a fresh
    forward, one that commits 14 and 15 the carried rows. `mask_wins`: 6 and 7 lean to 14 (0.8) while 5
    is masked and are spread under either token, so MASK wins the pivot. Every later forward's view of
    the block is kept in `box["seen"]` (position -> token, as a query at position 6 sees it)."""

    def script(pos, seen):
        canvas, _ = view(seen, CMASK)
        later = box["model"].calls > 2
        if later and pos == 6:
            box["seen"].append({p: t for p, t in canvas.items() if p >= 4})
        logits = torch.full((CV,), -30.0)
        five = canvas.get(5)
        if canvas.get(pos, CMASK) != CMASK:
            logits[canvas[pos]] = 10.0  # a decoded position keeps its token
        elif pos == 4:
            logits[10] = 10.0
        elif pos == 5:
            logits[11], logits[12] = 2.0, 1.8
        elif mask_wins:
            if five == CMASK:
                logits[14], logits[15] = math.log(0.8), math.log(0.2)
            else:
                logits[2:CMASK] = 0.0
        elif five == 11:
            logits[(16 if pos == 6 else 17) if later else (14 if pos == 6 else 15)] = 10.0
        else:
            logits[2:CMASK] = 0.0  # spread: top-10 mass about 0.53, never a pivot
        return logits

    return script


def _carry_run(carry: bool, cache: str, mask_wins: bool = False):
    box = {"seen": []}
    model = ScriptedModel(CV, _carry_script(box, mask_wins))
    box["model"] = model
    engine = Engine(model, mask_id=CMASK, eos_ids=[1], pad_id=0)
    events = []
    dec = build("rps", {"carry": str(carry).lower()})
    out = engine.generate([[5, 6, 7, 8]], dec, GenerationConfig(4, 4, cache=cache), trace=events.append)[0]
    return out, events, model, box["seen"]


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_carry_true_commits_from_the_winning_variant_with_no_forward_between(cache):
    out, events, model, seen = _carry_run(True, cache)
    assert [e["phase"] for e in events] == ["step", "resolve", "step"]
    step, resolve, after = events
    assert step["committed"] == [[0, 10]] and step["forward"] == "lookahead" and resolve["chosen"] == 11
    assert resolve["forward"] is None and resolve["variant"] == 0
    assert after["nfe"] == resolve["nfe"] == 2  # the step reads the lookahead forward's carried rows
    assert sorted(after["committed"]) == [[2, 14], [3, 15]]
    assert out.tokens == (10, 11, 14, 15) and out.nfe == model.calls == 2 and out.lookahead_nfe == 1
    assert seen == []


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_carry_false_runs_a_fresh_forward_on_the_canvas_with_the_pivot_committed(cache):
    out, events, model, seen = _carry_run(False, cache)
    assert [e["phase"] for e in events] == ["step", "resolve", "step"]
    step, resolve, after = events
    assert step["forward"] == "lookahead" and resolve["chosen"] == 11
    assert resolve["forward"] == "normal" and resolve["variant"] is None  # nothing carried
    # one more forward, counted, over the canvas holding the standard commit and the pivot's token
    assert out.nfe == model.calls == 3 and out.lookahead_nfe == 1
    assert seen == [{4: 10, 5: 11, 6: CMASK, 7: CMASK}]
    # the step after it reads that forward (16, 17), not the variant's rows (14, 15)
    assert after["nfe"] == 3 and sorted(after["committed"]) == [[2, 16], [3, 17]]
    assert after["p"] == pytest.approx([1.0, 1.0])
    assert out.tokens == (10, 11, 16, 17)


def test_carry_false_runs_the_fresh_forward_when_mask_wins_too():
    out, events, model, seen = _carry_run(False, "none", mask_wins=True)
    resolve = events[1]
    assert resolve["phase"] == "resolve" and resolve["chosen"] == "MASK" and resolve["forward"] == "normal"
    assert seen[0] == {4: 10, 5: CMASK, 6: CMASK, 7: CMASK}  # the canvas as the resolve left it
    assert events[2]["phase"] == "step" and events[2]["nfe"] == 3
    # the opening, one per step that asked for one, one per resolve that carried nothing
    asked = [e for e in events if e["forward"] is not None]
    assert out.nfe == model.calls == 1 + len(asked)
    assert sum(e["phase"] == "resolve" for e in asked) == out.lookahead_nfe  # no resolve here ends the block


def test_carry_false_traces_the_step_after_a_resolve_under_its_own_forward():
    """The stored trace (what `ripple report` counts parallel failures from) puts the step after a
    resolve in the resolve's forward with carry on, and in the next forward with carry off."""
    from ripple.platform.runtime.tracing import Trace

    for carry, forward, variant in ((True, 2, 0), (False, 3, None)):
        _, events, _, _ = _carry_run(carry, "none")
        decisions = Trace.from_events(events).decisions
        assert [(d.phase, d.forward, d.variant) for d in decisions] == [
            ("step", 1, None), ("resolve", 2, 0 if carry else None), ("step", forward, variant)]


def test_carry_is_a_flag_and_new_at_its_default():
    assert rps().params.carry is True and rps(carry="false").params.carry is False
    assert rps(carry="True").params.carry is True  # YAML's true reaches from_strings as "True"
    with pytest.raises(RippleError, match="carry='yes' is invalid; accepted: true or false"):
        rps(carry="yes")
    assert build("rps", {}).Params.id_neutral()["carry"] is True



def test_a_plugin_may_declare_a_flag_but_not_a_bare_bool():
    """`flag()` is the fourth field kind a decoder's Params may use (registry.check_decoder_class); its
    accepted values are listed as the others' ranges are."""
    from dataclasses import dataclass, fields

    from ripple.decoders.confidence import Confidence
    from ripple.decoders.params import HyperParams, flag, range_text
    from ripple.decoders.registry import check_decoder_class

    @dataclass(frozen=True)
    class Flagged(HyperParams):
        on: bool = flag(False, doc="a switch")

    @dataclass(frozen=True)
    class Bare(HyperParams):
        on: bool = True

    def decoder(params):
        return type("Plugged", (Confidence,), {"name": "plugged", "Params": params})

    check_decoder_class("plugged", decoder(Flagged))
    assert Flagged.from_strings("plugged", {"on": "true"}).on is True and Flagged().on is False
    assert range_text(fields(Flagged)[0].metadata, bool) == "true or false"
    with pytest.raises(RippleError, match="on=1 is invalid; accepted: true or false"):
        Flagged(on=1)
    with pytest.raises(TypeError, match="not declared with hp\\(\\), choice\\(\\), flag\\(\\) or text\\(\\)"):
        check_decoder_class("plugged", decoder(Bare))
