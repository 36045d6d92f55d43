"""`learn2pd` against Learn2PD's own loops (../shared/golden/learn2pd/trajectories.json: 40 runs of its
code on ripple-tiny), its filter artifact, and its one-line refusals."""
import dataclasses
import json
import os

import pytest
import torch

from ripple.cli import main
from ripple.decoders import build
from ripple.decoders import filters as F
from ripple.decoders.filters import FilterCard, build_filter, load_filter, read_filter, save_filter
from ripple.decoders.learn2pd import LANES, softmax_like_reference
from ripple.errors import RippleError
from ripple.platform.runtime.engine import Engine, GenerationConfig

MASK = 3  # ripple-tiny's mask id, as the golden facts name it (checked against the loaded model below)
CACHE = {"l2p_eot_prefix_cache": "prefix", "l2p_eot_dual_cache": "dual"}  # the others run without a cache


class Inputs:
    """ripple-tiny's model, recording each forward's input length (the golden cases' `input`)."""

    def __init__(self, model):
        self.model, self.seen = model, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, tokens, *args, **kwargs):
        self.seen.append(tokens.shape[1])
        return self.model(tokens, *args, **kwargs)


@pytest.fixture(scope="module")
def tiny():
    from ripple.platform.runtime.loading import load_model

    lm = load_model("ripple-tiny", dtype="float32", device="cpu")
    assert lm.mask_id == MASK
    return lm


@pytest.fixture(scope="module")
def cases(golden):
    return json.loads((golden / "learn2pd" / "trajectories.json").read_text())["cases"]


def _settings(case, golden) -> tuple[dict, str]:
    """A case's method as learn2pd's hyperparameters and cache."""
    method = case["method"]
    trained = golden / "learn2pd" / f"filter_block{case['block_length']}.safetensors"
    filt = "none" if method in ("original", "eot") else str(trained)
    settings = {"filter": filt, "eot": "true" if "eot" in method else "false", "steps": str(case["steps"])}
    if case["threshold"] is not None:
        settings["threshold"] = str(case["threshold"])
    return settings, CACHE.get(method, "none")


def _run(tiny, case, golden):
    """One case through the engine: output and per forward (its input length, the commits that survived its
    own cut, k, the response length after its cut)."""
    settings, cache = _settings(case, golden)
    model = Inputs(tiny.model)
    engine = Engine(model, mask_id=tiny.mask_id, eos_ids=tiny.eos_ids, pad_id=tiny.pad_id)
    events = []
    out = engine.generate([case["prompt"]], build("learn2pd", settings),
                          GenerationConfig(case["gen_length"], case["block_length"], cache), trace=events.append)[0]
    forwards = []
    for e in (e for e in events if e["phase"] == "step"):
        cut = e.get("cut")  # a position committed and cut by the same step leaves no trace (the golden rule)
        forwards.append({"input": model.seen[e["nfe"] - 1], "commits": sorted(c for c in e["committed"]
                                                                               if cut is None or c[0] < cut),
                         "k": e["k"], "cut": cut})
    assert len(forwards) == len(model.seen) == out.nfe  # one decision per forward, every forward counted
    return out, forwards


def _golden_forwards(case, n):
    return [{"input": f["input"], "commits": sorted(f["commits"]), "k": f["k"], "cut": f.get("cut")}
            for f in case["forwards"][:n]]


def test_the_public_cases_are_those_the_issue_names(cases):
    assert len(cases) == 40
    assert {c["method"] for c in cases} == {"original", "eot", "l2p", "l2p_eot", "l2p_eot_prefix_cache",
                                            "l2p_eot_dual_cache"}
    errors = [c for c in cases if c["error"]]
    assert len(errors) == 24 and all("l2p_eot" in c["method"] for c in errors)
    assert all(c["complete"] is False for c in errors) and all(c["complete"] for c in cases if not c["error"])
    assert sum(1 for c in cases for f in c["forwards"] if f.get("tie", {}).get("rule") == "std::nth_element") == 9


def test_runs_without_error_reproduce_response_nfe_and_every_forward(tiny, cases, golden):
    """16 runs (generate, generate_predict_eot, generate_learn2parallel at 0.9 and 0.96, settings A and B):
    the response, NFE, and each forward's input length, commits, k and cut."""
    failed = []
    for case in (c for c in cases if not c["error"]):
        out, forwards = _run(tiny, case, golden)
        if (list(out.tokens), out.nfe, forwards) != (case["response"], case["nfe"], _golden_forwards(case, None)):
            failed.append(case["case"])
        # a cut response is shorter than gen_length: its positions and generated tokens count what is left
        eos = next((i for i, t in enumerate(out.tokens) if t in tiny.eos_ids), len(out.tokens))
        assert (out.gen_length, out.generated_tokens) == (len(out.tokens), eos), case["case"]
    assert any(len(c["response"]) < c["gen_length"] for c in cases if not c["error"])  # cut runs among them
    assert failed == [], failed


def test_runs_with_error_reproduce_every_forward_before_it_and_end_complete(tiny, cases, golden):
    """24 runs where Learn2PD's filter met a block a cut left shorter than B and stopped with a shape error:
    every forward before `after_forward` as the reference made it, then, with the filter's input padded
    with zeros, a complete response (no mask id) that keeps every token the reference had written."""
    failed = []
    for case in (c for c in cases if c["error"]):
        stop = case["error"]["after_forward"]  # the forward whose filter call raised
        out, forwards = _run(tiny, case, golden)
        same = (forwards[:stop] == _golden_forwards(case, stop)
                and forwards[stop]["input"] == case["forwards"][stop]["input"])
        kept = all(t == MASK or t == o for t, o in zip(case["response"], out.tokens))
        complete = MASK not in out.tokens and 0 < len(out.tokens) <= case["response_length"]
        if not (same and kept and complete and out.nfe > stop):
            failed.append(case["case"])
    assert failed == [], failed


def test_float32_probabilities_reduce_in_sixteen_lanes_in_order():
    """softmax_like_reference is exp(x - max) summed lane by lane over chunks of 16, lanes halved pairwise,
    times 1 / sum: checked against that order written out, for a vocabulary that is no multiple of 16."""
    torch.manual_seed(0)
    logits = torch.randn(5, 100) * 6  # [R, V]
    got = softmax_like_reference(logits)
    e = torch.exp(logits - logits.max(dim=-1, keepdim=True).values)
    for r in range(5):
        lanes = torch.zeros(LANES)
        for c in range(0, 100, LANES):
            chunk = e[r, c:c + LANES]
            lanes[:chunk.numel()] = lanes[:chunk.numel()] + chunk
        while lanes.numel() > 1:
            lanes = lanes[:lanes.numel() // 2] + lanes[lanes.numel() // 2:]
        assert torch.equal(got[r], e[r] * (1 / lanes[0]))
    assert torch.allclose(got, torch.softmax(logits, dim=-1), rtol=1e-6, atol=1e-7)
    half = logits.to(torch.bfloat16)  # other dtypes: torch's softmax in that dtype, as the reference
    assert torch.equal(softmax_like_reference(half), torch.softmax(half, dim=-1))


# ---------------------------------------------------------------------------- the filter artifact
def test_golden_filters_load_as_learn2pd_filters_of_their_block_length(golden):
    for b in (16, 32):
        f = read_filter(golden / "learn2pd" / f"filter_block{b}.safetensors")
        card = json.loads((golden / "learn2pd" / f"filter_block{b}.json").read_text())
        assert (f.card.architecture, f.card.block_length, f.card.features) == ("learn2pd", b, ("confidence",))
        assert f.sha256 == card["file"]["sha256"] and f.card.model_sha256 == card["model"]["sha256"]
        assert {k: tuple(v.shape) for k, v in f.module.state_dict().items()} == {
            k: tuple(v) for k, v in card["architecture"]["state_dict"].items()}
        x = torch.rand(3, b)
        sd = f.module.state_dict()
        hidden = torch.relu(x @ sd["linear1.weight"].T + sd["linear1.bias"])  # [3, 2B]
        manual = hidden @ sd["linear2.weight"].T + sd["linear2.bias"]  # [3, B]
        assert torch.equal(f.module(x), manual)


def test_save_and_load_round_trip_with_the_card(tmp_path):
    torch.manual_seed(1)
    module = build_filter("learn2pd", 8)
    card = FilterCard("learn2pd", 8, ("confidence",), model="ripple-tiny", model_sha256="ab" * 32, task="arith",
                      split="train", prompts=200, records=859, recipe="learn2pd", seeds=(0,), epochs=3000,
                      metrics={"test_false_positive_at_0.9": 0.04}, settings={"gen_length": 48})
    written = save_filter(tmp_path / "f", module, card)
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["card.json", "model.safetensors"]
    assert written == dataclasses.replace(card, weights_sha256=F.file_sha256(tmp_path / "f" / "model.safetensors"))
    assert FilterCard.from_json(written.to_json()) == written
    for where in (tmp_path / "f", tmp_path / "f" / "model.safetensors"):  # the directory or its weights file
        back = read_filter(where)
        assert back.card == written and back.sha256 == written.weights_sha256
        assert all(torch.equal(a, b) for a, b in zip(back.module.state_dict().values(), module.state_dict().values()))
    os.remove(tmp_path / "f" / "card.json")  # without its card the file still says what it is
    bare = read_filter(tmp_path / "f" / "model.safetensors").card
    assert (bare.architecture, bare.block_length, bare.model_sha256) == ("learn2pd", 8, "ab" * 32)
    # the same filter saved again is the same file (safetensors alone writes its metadata in any order: the
    # same filter retrained would be another cell)
    again = {save_filter(tmp_path / f"again{i}", module, card).weights_sha256 for i in range(4)}
    assert again == {written.weights_sha256}


def _refused(call, *words):
    with pytest.raises(RippleError) as err:
        call()
    text = str(err.value)
    assert "\n" not in text and all(w in text for w in words), text


def test_filters_that_cannot_serve_the_run_are_refused_in_one_line(tmp_path, golden):
    gold = golden / "learn2pd" / "filter_block16.safetensors"
    ripple_tiny = "fbeff4245a94"  # its weights digest, as the engine gives it (the card holds the full sha256)
    load_filter(gold, 16, ripple_tiny)  # the right block length and model
    _refused(lambda: load_filter(tmp_path / "nosuch", 16), "does not exist", "ripple learn")
    _refused(lambda: load_filter(gold, 32, ripple_tiny), "blocks of 16", "blocks of 32")
    _refused(lambda: load_filter(gold, 16, "0123456789ab"), "another model", "ripple-tiny")
    (tmp_path / "bad.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    _refused(lambda: load_filter(tmp_path / "bad.safetensors", 16), "unreadable")
    save_filter(tmp_path / "odd", build_filter("learn2pd", 16), FilterCard("learn2pd", 16, ("confidence",)))
    card = json.loads((tmp_path / "odd" / "card.json").read_text())
    (tmp_path / "odd" / "card.json").write_text(json.dumps({**card, "architecture": "nosuch"}))
    _refused(lambda: load_filter(tmp_path / "odd", 16), "architecture 'nosuch'", "accepted: learn2pd, ripple")


def test_the_filter_loads_once_per_process_and_again_when_its_file_changes(tmp_path, monkeypatch):
    torch.manual_seed(2)
    save_filter(tmp_path / "f", build_filter("learn2pd", 4), FilterCard("learn2pd", 4, ("confidence",)))
    reads = []
    real = F.read_filter
    monkeypatch.setattr(F, "read_filter", lambda path: reads.append(path) or real(path))
    F._cached.cache_clear()
    for _ in range(3):
        load_filter(tmp_path / "f", 4)
    assert len(reads) == 1
    torch.manual_seed(3)
    save_filter(tmp_path / "f", build_filter("learn2pd", 4), FilterCard("learn2pd", 4, ("confidence",)))
    assert load_filter(tmp_path / "f", 4).sha256 == F.file_sha256(tmp_path / "f" / "model.safetensors")
    assert len(reads) == 2


def _refused_cli(capsys, argv, *words):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert all(w in captured.err for w in words), captured.err


def test_ripple_generate_refuses_in_one_line(capsys, tmp_path, golden):
    """Exit 2, one line: a filter of another block length or model, a missing file, and learn2pd on a
    uniform-noise family (no filter where the model ships none: tests/decoders/test_learn2pd_shipped.py)."""
    base = ["generate", "--model", "ripple-tiny", "--input-ids", "5,6,7", "--decoder", "learn2pd", "--device", "cpu"]
    gold = str(golden / "learn2pd" / "filter_block16.safetensors")
    _refused_cli(capsys, [*base, "--set", f"filter={gold}", "--gen-length", "32", "--block-length", "32"],
                 "blocks of 16", "blocks of 32")
    save_filter(tmp_path / "other", build_filter("learn2pd", 16),
                FilterCard("learn2pd", 16, ("confidence",), model="another", model_sha256="0" * 64))
    _refused_cli(capsys, [*base, "--set", f"filter={tmp_path / 'other'}", "--gen-length", "16", "--block-length", "16"],
                 "another model")
    _refused_cli(capsys, [*base, "--set", f"filter={tmp_path / 'nosuch'}", "--gen-length", "16", "--block-length",
                          "16"], "does not exist")
    _refused_cli(capsys, ["generate", "--model", str(golden / "diffusion-gemma-tiny"), "--input-ids", "5,6,7",
                          "--decoder", "learn2pd", "--set", "filter=none", "--device", "cpu"],
                 "decoder 'learn2pd' decodes mask-noise families", "uniform-noise family")


def test_the_filters_sha256_is_part_of_the_cell_id(tmp_path):
    from ripple.platform.experiments.spec import Cell

    def cell(**params):
        return Cell(model="ripple-tiny", task="arith", decoder="learn2pd", limit=2, gen_length=48, block_length=16,
                    cache="none", seed=0, dtype="float32", chat=False, split="test", stop_at_eos=False,
                    params=tuple(sorted({"eot": False, "filter": "", "steps": 0, "threshold": 0.96, **params}.items())))

    torch.manual_seed(4)
    save_filter(tmp_path / "f", build_filter("learn2pd", 16), FilterCard("learn2pd", 16, ("confidence",)))
    first = cell(filter=str(tmp_path / "f"))
    assert first.identity()["artifacts"] == {"filter": F.file_sha256(tmp_path / "f" / "model.safetensors")}
    torch.manual_seed(5)  # the same path, other weights: another cell
    save_filter(tmp_path / "f", build_filter("learn2pd", 16), FilterCard("learn2pd", 16, ("confidence",)))
    again = cell(filter=str(tmp_path / "f"))
    assert again.cell_id != first.cell_id and again.params == first.params
    assert "artifacts" not in cell(filter="none").identity()  # no file read, nothing added
