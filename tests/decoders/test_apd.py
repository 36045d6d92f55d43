"""`apd` (ripple/decoders/apd.py) under its cache policy `sliding` (ripple/platform/runtime/caches/sliding.py):
every public case of APD's own code (shared/golden/dream-tiny/apd_trajectories.json, on dream-tiny with
qwen2-verifier-tiny) step for step, the LLaDA family (no logit shift) against a plain restatement without a
cache, a batch against single runs, and the refusals in one line, exit 2."""
from __future__ import annotations

import json

import pytest
import torch

from ripple.cli import main
from ripple.decoders.apd import APD, APDParams
from ripple.errors import RippleError
from ripple.platform.runtime.causal import next_token_logits
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.platform.runtime.loading import EMBEDDED, load_causal, load_model
from tests.platform.experiments.test_auxiliary_models import write_verifier


def _cases(golden):
    return json.loads((golden / "dream-tiny" / "apd_trajectories.json").read_text())["cases"]


class Recorder:
    """A pass-through wrapper of a model's forward that records each call's window [start, end) of position
    ids and how many cached positions it read (observation only)."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, tokens, positions, **kwargs):
        kv = kwargs.get("kv")
        self.calls.append(([int(positions[0, 0]), int(positions[0, -1]) + 1], 0 if kv is None else kv.length))
        return self.model(tokens, positions, **kwargs)


@pytest.fixture(scope="module")
def dream(golden):
    """dream-tiny with qwen2-verifier-tiny beside it, both recorded; loaded once for the module."""
    lm = load_model(str(golden / "dream-tiny"), dtype="float32", device="cpu")
    verifier = Recorder(load_causal(str(golden / "qwen2-verifier-tiny"), "float32", "cpu").model)
    engine = Engine.from_loaded(lm)
    engine.model = Recorder(lm.model)
    engine.auxiliary["verifier"] = verifier
    return engine, verifier


def _params(case, verifier="verifier"):
    e = case["effective"]
    return APDParams(verifier=verifier, mixture=case["R"], kv_window=case["W"], max_lookahead=case["M"],
                     temperature=e["temperature"], top_p=e["top_p"], top_k=e["top_k"] or 0)


def test_the_public_cases_cover_apds_settings(golden):
    cases = _cases(golden)
    assert len(cases) == 56
    assert {(c["R"], c["W"], c["M"]) for c in cases} == {(r, w, m) for r in (0.5, 0.7, 0.9) for w in (2, 64)
                                                          for m in (4, 16)}
    assert {c["effective"]["temperature"] for c in cases} == {0.0, 0.2, 1.0}
    assert {c["stop"] for c in cases} == {"eos", "canvas_full"}


@pytest.mark.parametrize("index", range(56))
def test_apd_reproduces_apds_own_runs_step_for_step(golden, dream, index):
    case = _cases(golden)[index]
    engine, verifier = dream
    engine.model.calls.clear()
    verifier.calls.clear()
    events = []
    G, P = case["gen_length"], len(case["prompt"])
    out, = engine.generate([case["prompt"]], APD(_params(case)), GenerationConfig(G, G, "sliding"),
                           trace=events.append, seeds=[case["seed"]])
    assert list(out.tokens) == case["response"]
    assert ("eos" if 2 in out.tokens else "canvas_full") == case["stop"]
    assert out.nfe == case["nfe_dllm"] and dict(out.auxiliary_nfe) == {"verifier": case["nfe_verifier"]}
    steps = [e for e in events if e["phase"] == "step"]
    assert len(steps) == len(case["steps"]) == len(engine.model.calls) == len(verifier.calls)
    for got, want, dllm, ver in zip(steps, case["steps"], engine.model.calls, verifier.calls):
        a = want["accepted"]
        assert P + got["pos"] == want["pos"] and got["accepted"] == a
        assert [t for _, t in got["committed"]] == want["committed"]
        assert [p for p, _ in got["committed"]] == list(range(got["pos"], got["pos"] + a))
        assert got["rejected_by"] == want["rejected_by"]
        assert got["draft"][:a + 1] == want["draft"][:a + 1]  # later draft ids decide nothing
        assert list(dllm) == [want["dream"]["window"], want["dream"]["past"]]
        assert list(ver) == [want["verifier"]["window"], want["verifier"]["past"]]


def test_a_batch_decodes_what_each_prompt_decodes_alone(golden, dream):
    """Rows of different prompt lengths (left padding) keep their own windows, keys and draws."""
    engine, _ = dream
    cases = _cases(golden)
    for s in (2, 9, 27):  # default temperature, temperature 0, temperature 0.2 with top_p 0.95
        pair = [c for c in cases if c["setting"] == s]
        assert len(pair) == 2 and len({len(c["prompt"]) for c in pair}) == 2
        G = pair[0]["gen_length"]
        outs = engine.generate([c["prompt"] for c in pair], APD(_params(pair[0])), GenerationConfig(G, G, "sliding"),
                               seeds=[c["seed"] for c in pair])
        assert [(list(o.tokens), o.nfe, o.auxiliary_nfe) for o in outs] == [
            (c["response"], c["nfe_dllm"], (("verifier", c["nfe_verifier"]),)) for c in pair]


@pytest.fixture(scope="module")
def ripple_tiny(golden, tmp_path_factory):
    lm = load_model("ripple-tiny", dtype="float32", device="cpu")
    verifier = load_causal(str(write_verifier(tmp_path_factory.mktemp("ar") / "v", golden, seed=3)), "float32", "cpu")
    engine = Engine.from_loaded(lm)
    engine.auxiliary["verifier"] = verifier.model
    return engine, lm, verifier.model


def _plain_apd(lm, verifier, prompt, G, R, M):
    """APD at temperature 0 with no cache, on a family whose row j predicts position j: each step recomputes
    the canvas up to the lookahead, the verifier reads the prompt, the committed tokens and the draft."""
    x = torch.tensor(list(prompt) + [lm.mask_id] * G)
    cur, N, forwards = len(prompt), len(prompt) + G, 0
    while cur < N:
        right = min(cur + M, N)
        d = lm.model(x[None, :right], torch.arange(right)[None]).logits[0, cur:right].float()  # [L, V]
        d[:, lm.mask_id] = float("-inf")
        forwards += 1
        draft = d.argmax(-1)  # [L]
        v = next_token_logits(verifier, torch.cat((x[:cur], draft))[None])[0, cur - 1:right - 1]  # [L, V]
        target = (R * d + (1 - R) * v).argmax(-1)
        a = 1
        while a < len(draft) and draft[a] == target[a]:
            a += 1
        x[cur:cur + a] = draft[:a]
        cur += a
        if bool(torch.isin(x[len(prompt):cur], torch.tensor(lm.eos_ids)).any()):
            break
    return x[len(prompt):cur].tolist(), forwards


@pytest.mark.parametrize("R, M", [(0.5, 4), (0.9, 16)])
def test_on_the_llada_family_apd_reads_each_positions_own_row(ripple_tiny, R, M):
    """ripple-tiny (LLaDA's family, no logit shift) with a random Qwen2 verifier on its vocabulary: with a
    window as long as the canvas nothing cached is stale, so APD is the plain restatement above."""
    engine, lm, verifier = ripple_tiny
    prompt = lm.tokenizer.encode("12+7=")
    G = 24
    out, = engine.generate([prompt], APD(APDParams(verifier="verifier", mixture=R, kv_window=64, max_lookahead=M,
                                                   temperature=0.0)), GenerationConfig(G, G, "sliding"))
    tokens, forwards = _plain_apd(lm, verifier, prompt, G, R, M)
    assert list(out.tokens) == tokens and out.nfe == forwards == dict(out.auxiliary_nfe)["verifier"]
    assert out.nfe < G or len(tokens) < G  # at least one step kept more than one draft token, or the run stopped


def _refused(capsys, argv, *words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(w in err for w in words), err


def test_ripple_generate_refuses_in_one_line(capsys, golden, tmp_path):
    dream, verifier = str(golden / "dream-tiny"), str(golden / "qwen2-verifier-tiny")
    base = ["generate", "--input-ids", "5,9,17", "--decoder", "apd", "--device", "cpu", "--dtype", "float32",
            "--gen-length", "8", "--block-length", "8"]
    on_dream = [*base, "--model", dream, "--set", f"verifier={verifier}"]
    for cache in ("none", "prefix", "dual"):
        _refused(capsys, [*on_dream, "--cache", cache], f"does not support cache '{cache}'; supported: sliding")
    for setting, shown, accepted in (
            ("mixture=1.5", "mixture=1.5", "float in [0.0, 1.0]"),
            ("mixture=-0.1", "mixture=-0.1", "float in [0.0, 1.0]"),
            ("kv_window=0", "kv_window=0", "int in [1, inf]"), ("max_lookahead=0", "max_lookahead=0", "int in [1, inf]"),
            ("top_p=0", "top_p=0.0", "float in (0.0, 1.0]"), ("top_p=1.2", "top_p=1.2", "float in (0.0, 1.0]"),
            ("temperature=-0.5", "temperature=-0.5", "float in [0.0, inf]"), ("top_k=-1", "top_k=-1", "int in [0, inf]")):
        _refused(capsys, [*on_dream, "--set", setting], f"apd hyperparameter {shown} is invalid; accepted: {accepted}")
    _refused(capsys, [*base, "--model", dream], "needs a verifier: set verifier=")
    _refused(capsys, [*base, "--model", dream, "--set", f"verifier={dream}"], "not a causal LM", "accepted model_types: qwen2")
    _refused(capsys, [*base, "--model", "ripple-tiny", "--set", f"verifier={verifier}"],
             "scores 160 ids but the dLLM's vocabulary has 512")
    _refused(capsys, [*on_dream, "--block-length", "4"], "as one block", "block_length to gen_length (8), got 4")
    ar = write_verifier(tmp_path / "ar", golden)  # on ripple-tiny's vocabulary, which ripple-tiny-bd shares
    _refused(capsys, [*base, "--model", "ripple-tiny-bd", "--set", f"verifier={ar}"],
             "decoder 'apd' decodes the dream, llada families; this model is llada2_moe")


def test_apd_cells_compare_with_default_and_the_oracle_at_their_blocks(golden, tmp_path):
    """APD's block and cache are its own (`own_geometry`): its cells take the speedup baseline and NFE / oracle of
    the default and oracle cells with the same other settings; a block decoder at another block gets none."""
    from ripple.platform.experiments.metrics import baseline_ids, oracle_ids
    from ripple.platform.experiments.spec import parse_spec

    ar = str(write_verifier(tmp_path / "ar", golden))
    spec = parse_spec({"models": ["ripple-tiny"], "tasks": ["arith", "pyfunc"], "gen_lengths": [48], "block_lengths": [16],
                       "decoders": ["default", "oracle", {"name": "apd", "params": {"verifier": ar},
                                                          "caches": ["sliding"], "block_lengths": [48]},
                                    {"name": "confidence", "block_lengths": [48]}]}, "t")
    cells = {c.cell_id: c for c in spec.cells}
    bases, oracles = baseline_ids(cells), oracle_ids(cells)
    of = {(c.decoder, c.task): c.cell_id for c in spec.cells}
    for task in ("arith", "pyfunc"):
        assert bases[of["apd", task]] == of["default", task] and oracles[of["apd", task]] == of["oracle", task]
        assert bases[of["confidence", task]] is None and oracles[of["confidence", task]] is None


def test_without_a_block_length_apd_decodes_the_response_as_one_block(golden, dream):
    """`ripple.generate` (and the CLI) take the block to be the response for apd when none is given, and run
    `sliding`, its cache; the result is the engine's at block = gen_length."""
    import ripple

    case = next(c for c in _cases(golden) if c["effective"]["temperature"] == 0.0)
    out = ripple.generate(str(golden / "dream-tiny"), case["prompt"], "apd", gen_length=case["gen_length"],
                          dtype="float32", verifier=str(golden / "qwen2-verifier-tiny"), mixture=case["R"],
                          kv_window=case["W"], max_lookahead=case["M"], temperature=0.0)
    assert list(out.tokens) == case["response"] and (out.nfe, out.verifier_nfe) == (case["nfe_dllm"],
                                                                                   case["nfe_verifier"])


def test_blocks_aligned_to_position_0_that_split_the_response_are_refused(golden, dream):
    engine, verifier = dream
    case = _cases(golden)[0]  # a prompt of 12: blocks aligned to 0 put its tail in the response's first block
    G = case["gen_length"]
    engine.model.calls.clear()
    verifier.calls.clear()
    with pytest.raises(RippleError, match="^decoder 'apd' decodes the response as one block: blocks aligned"):
        engine.generate([case["prompt"]], APD(_params(case)), GenerationConfig(G, G, "sliding", block_align="absolute"))
    assert engine.model.calls == [] and verifier.calls == []  # before any forward
