"""`topk`, ParallelBench's unmasking methods: `ripple generate` reproduces ParallelBench's own decoding
code on llada-tiny and dream-tiny (`parallelbench_trajectories.json`: output, every forward's commits
in order, NFE with the forwards that commit nothing), its rules hold where the golden cases cannot
reach (the mask id as Dream's x0, the factor rule's last rank), and every bad value is one line, exit 2."""
import json

import pytest
import torch

from ripple.cli import main
from ripple.decoders import build
from ripple.decoders.topk import TopK
from ripple.platform.runtime.engine import GenerationConfig
from ripple.sweeps.spaces import derive_space
from ripple.testing import SCRIPTED_MASK, SCRIPTED_PROMPTS, SCRIPTED_VOCAB, compare_trajectories, scripted_engine

MODELS = ("llada-tiny", "dream-tiny")
# ParallelBench's method names (LLaDA's `remasking`, Dream's `alg`) -> topk's rank (docs/decoders.md)
RANK = {"low_confidence": "confidence", "maskgit_plus": "confidence", "confidence": "confidence",
        "topk_margin": "margin", "entropy": "entropy", "random": "random"}


def topk_settings(case) -> dict:
    """A case's generate_kwargs as topk's --set pairs: the ranking from ParallelBench's method name, then
    `threshold` -> tau, `factor` -> factor, otherwise `steps` (forwards over the whole response)."""
    kw = case["generate_kwargs"]
    settings = {"rank": RANK[kw.get("remasking", kw.get("alg"))]}
    if kw["threshold"] is not None:
        settings["tau"] = kw["threshold"]
    elif kw["factor"] is not None:
        settings["factor"] = kw["factor"]
    else:
        settings["steps"] = kw["steps"]
    return settings


def _cases(golden, model):
    return json.loads((golden / model / "parallelbench_trajectories.json").read_text())["cases"]


def test_the_cases_cover_every_ranking_rule_and_quirk(golden):
    for model in MODELS:
        cases = _cases(golden, model)
        assert len(cases) == 16 and {c["seed"] for c in cases} == {1234}
        assert {(c["family"], c["ranking"]) for c in cases} == {
            ("topk", "confidence"), ("topk", "margin"), ("topk", "entropy"), ("topk", "random"),
            ("threshold", "confidence"), ("factor", "confidence")}
        for c in cases:  # the mapping agrees with the file's own reading of the method names
            s = topk_settings(c)
            assert s["rank"] == c["ranking"] and ("steps" in s) == (c["family"] == "topk")
        events = {k for c in cases for k in c["events"]}
        assert "factor_last_index_quirk" in events
        assert ("dream_schedule_float32_shortfall" in events) == (model == "dream-tiny")
        assert ("mask_logit_patched" in events) == (model == "llada-tiny")
        # forwards that commit nothing are part of the record (and of NFE)
        idle = sum(not f["committed"] for c in cases for f in c["steps_log"])
        assert (idle > 0) == (model == "dream-tiny")


@pytest.mark.parametrize("model", MODELS)
def test_parallelbench_trajectories_forward_for_forward(golden, model, monkeypatch):
    """Output, every forward's commits in order, NFE: through `ripple generate --decoder topk --seed S`;
    the random ranking makes ParallelBench's calls on the sample's generator, shape for shape."""
    cases = _cases(golden, model)
    for c in cases:
        assert c["nfe"] == len(c["steps_log"]) == sum(c["nfe_per_block"])  # one record per forward
    draws, rand = [], torch.rand

    def recorded(size, *args, generator=None, **kwargs):
        if generator is not None:
            draws.append(list(size))
        return rand(size, *args, generator=generator, **kwargs)

    monkeypatch.setattr(torch, "rand", recorded)
    assert compare_trajectories(golden / model, cases, "topk", settings=topk_settings) == []
    assert draws == [shape for c in cases if c["ranking"] == "random" for shape in c["rng"]["shapes"]]


def test_a_wrong_seed_or_a_missing_quirk_is_caught(golden, monkeypatch):
    """The comparison can fail: another seed changes the random ranking's draws, and exact Dream quotas
    (no float32 shortfall) or LLaDA scores with the mask id's probability change the trajectories."""
    llada = [c for c in _cases(golden, "llada-tiny") if c["ranking"] == "random"][:1]
    assert compare_trajectories(golden / "llada-tiny", [{**llada[0], "seed": 7}], "topk", settings=topk_settings)
    dream = [c for c in _cases(golden, "dream-tiny") if c["case"] == "p0-maskgit_plus-b8-k1"]
    monkeypatch.setattr(TopK, "_shifted", property(lambda self: False), raising=False)
    monkeypatch.setattr(TopK, "prepare", lambda self, shape: None)
    assert compare_trajectories(golden / "dream-tiny", dream, "topk", settings=topk_settings)


def test_dream_quotas_fall_short_in_float32_as_parallelbench_s_do():
    """The README's examples: k = 1 and k = 2 over 8 forwards of a block (S = 8)."""
    from ripple.decoders.base import BlockState

    def quotas(block, k):
        dec = TopK(TopK.Params(k=k))
        dec._shifted = True
        tokens = torch.full((block,), 9)
        st = BlockState(tokens, torch.zeros(block, 10), 9, 0)
        out = []
        for i in range(block // k):
            st.step = i
            q, _ = dec._quota(st, int(st.masked.sum()))
            out.append(q)
            tokens[torch.nonzero(tokens == 9).squeeze(-1)[:q]] = 1
        return out

    assert quotas(8, 1) == [1, 0, 1, 1, 1, 1, 1, 2]
    assert quotas(16, 2) == [2, 1, 2, 2, 2, 2, 2, 3]
    assert quotas(32, 1)[4] == 0 and quotas(32, 1)[-1] == 2


def test_the_factor_rule_never_tests_the_last_rank():
    dec = TopK(TopK.Params(factor=1.0))
    # bounds 1 - 1 / (i + 2): rank 1 0.667, rank 2 0.75, rank 3 0.8
    assert dec._factor_count(torch.tensor([0.99, 0.9, 0.7, 0.1])) == 2  # rank 2 below its bound
    assert dec._factor_count(torch.tensor([0.99, 0.9, 0.8, 0.1])) == 4  # only the last rank fails: all commit
    assert dec._factor_count(torch.tensor([0.9, 0.1])) == 2  # two left always commit together
    assert dec._factor_count(torch.tensor([0.2])) == 1
    assert dec._factor_count(torch.tensor([0.99, 0.5, 0.99])) == 1


def test_dream_s_mask_id_stays_masked_until_the_rule_must_go_on():
    """On a shifted family the mask id competes: a selected position whose x0 is the mask id commits
    nothing (a forward may commit nothing), and the block's last scheduled forward commits those
    positions' best other token, so every block ends within its S forwards and no mask is committed."""
    def script(pos, seen):  # rows 5, 9, 13 predict block position 1 of each block of 4: the mask id, p ~ 1
        logits = torch.arange(SCRIPTED_VOCAB, dtype=torch.float32) * 0.01
        logits[(pos * 7) % 30 + 2] = 5.0 + pos * 0.1
        if pos % 4 == 1:
            logits[SCRIPTED_MASK] = 20.0
        return logits

    engine, model = scripted_engine("shifted", script)
    events = []
    out = engine.generate([list(SCRIPTED_PROMPTS[0])], build("topk"), GenerationConfig(12, 4), trace=events.append)[0]
    assert out.nfe == 12 == model.calls and SCRIPTED_MASK not in out.tokens
    steps = [e for e in events if e["phase"] == "step"]
    assert not any(e["phase"] == "open" for e in events)  # no opening commit with cache none
    # S = 4 forwards per block, quotas 1, 1, 2 and the rest: the first three pick the mask-id position
    # first and write nothing there (two forwards commit nothing); the last commits its best other token
    assert [e["selected"] for e in steps[:4]] == [1, 1, 2, 3]
    assert [len(e["committed"]) for e in steps[:4]] == [0, 0, 1, 3]
    assert [1, (5 * 7) % 30 + 2] in steps[3]["committed"] and out.tokens[1] == (5 * 7) % 30 + 2


@pytest.mark.parametrize("settings,words", [
    (["rank=best"], ["rank='best'", "confidence, margin, entropy, random"]),
    (["k=0"], ["k=0", "int in [1, inf]"]),
    (["steps=-1"], ["steps=-1", "int in [0, inf]"]),
    (["tau=1.5"], ["tau=1.5", "float in [0.0, 1.0]"]),
    (["factor=-1"], ["factor=-1", "float in [0.0, inf]"]),
    (["tau=0.9", "factor=1.0"], ["tau=0.9 and factor=1.0", "at most one"]),
    (["k=2", "steps=8"], ["k=2 and steps=8", "one of"]),
    (["steps=8", "tau=0.9"], ["steps=8", "tau=0.9"]),
    (["k=3"], ["k=3 must divide block_length 8", "1, 2, 4, 8"]),
    (["steps=5"], ["steps=5", "number of blocks (2", "2, 4, 6"]),
    (["steps=18"], ["steps=18", "at most block_length"]),
    (["k=two"], ["k='two'", "not a number"]),
])
def test_bad_values_are_one_line_exit_2(golden, capsys, settings, words):
    argv = ["generate", "--model", str(golden / "llada-tiny"), "--input-ids", "51,109,11,50,61,38,2,148",
            "--decoder", "topk", "--gen-length", "16", "--block-length", "8", "--dtype", "float32", "--json"]
    for item in settings:
        argv += ["--set", item]
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1, cap.err
    for word in words:
        assert word in cap.err, cap.err


def test_listed_and_searchable(capsys):
    assert main(["decoders"]) == 0
    assert "topk" in capsys.readouterr().out
    space = derive_space("topk")  # the dataclass's default: the ranking
    assert [(d.name, d.grid_values()) for d in space.dims] == [("rank", ["confidence", "margin", "entropy", "random"])]
    assert space.param_space("grid")["rank"] == {"grid_search": ["confidence", "margin", "entropy", "random"]}
    assert type(space.param_space("random")["rank"]).__name__ == "Categorical"
    k = derive_space("topk", {"k": [1, 2, 4], "rank": "margin"})
    assert k.params_for({"k": 4}).to_dict() == {"rank": "margin", "k": 4, "steps": 0, "tau": 0.0, "factor": 0.0}
    tau = derive_space("topk", {"tau": [0.5, 0.9]})
    assert tau.params_for({"tau": 0.5}).tau == 0.5


def test_an_idle_decoder_must_still_end_its_blocks_within_block_length_steps():
    """`idle_steps` relaxes the progress invariant to a bound, which still fails a decoder that dawdles."""
    from ripple.decoders import Plan
    from ripple.decoders.base import Commit
    from ripple.testing import check_decoder

    class Dawdling(TopK):
        def step(self, state):
            if state.step < state.tokens.shape[0]:  # block_length forwards that commit nothing, then all
                return Plan()
            at = state.masked.nonzero().squeeze(-1)
            return Plan(Commit(at, torch.full_like(at, 3)))

    with pytest.raises(AssertionError, match="no progress"):
        check_decoder(lambda: Dawdling(), families=["full"], caches=["none"])
    check_decoder(lambda: TopK(TopK.Params(rank="entropy", k=2)), families=["shifted"], caches=["none", "dual"])


def test_deciding_the_first_position_excludes_block_copies():
    from ripple.decoders.wino import Wino
    from ripple.errors import RippleError

    class Both(Wino):
        decides_first_position = True

    engine, _ = scripted_engine("shifted")
    with pytest.raises(RippleError, match="decides_first_position with block copies"):
        engine.generate([list(SCRIPTED_PROMPTS[0])], Both(), GenerationConfig(8, 4))
