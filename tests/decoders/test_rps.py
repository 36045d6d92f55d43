"""Every branch of RPS (Algorithm 1), pinned on constructed distributions and a scripted model."""
import math

import pytest
import torch

from ripple.decoders import build
from ripple.decoders.base import BlockState, Lookahead
from ripple.decoders.rps import entropy
from ripple.errors import RippleError
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import ScriptedModel, hashed_script

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
