"""The renoising engine and the `renoise` decoder on diffusion-gemma-tiny: the 16 public reference runs
through `ripple generate` (tokens, and per step the argmax, the kept positions and the stop decision;
decoder forwards and encoder passes), the same runs with cache none and inside batches with other
prompts and seeds, and the one-line refusals between mask and uniform-noise decoders and families."""
import json

import pytest
import torch

from ripple.cli import main
from ripple.decoders import build
from ripple.errors import RippleError
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.platform.runtime.loading import load_model
from tests.platform.runtime.checkpoints import refused_in_one_line

NAME = "diffusion-gemma-tiny"
SETTINGS = {"max_denoising_steps": "steps", "t_max": "t_max", "t_min": "t_min", "entropy_bound": "entropy_bound",
            "stability_threshold": "stability", "confidence_threshold": "confidence"}


@pytest.fixture(scope="module")
def cases(golden):
    return {c["case"]: c for c in json.loads((golden / NAME / "trajectories.json").read_text())["cases"]}


@pytest.fixture(scope="module")
def gemma(golden):
    return load_model(str(golden / NAME), "float32", "cpu")


def _sets(case) -> list[str]:
    return [f"{ours}={case['params'][key]}" for key, ours in SETTINGS.items()]


def _run(engine, case, prompts, seeds, cache="prefix"):
    p = case["params"]
    config = GenerationConfig(p["max_new_tokens"], p["canvas_length"], cache, block_aligned=True)
    decoder = build("renoise", dict(s.split("=") for s in _sets(case)))
    return engine.generate(prompts, decoder, config, seeds=seeds)


PUBLIC = ["A-base", "A-real-defaults", "A-accept-all-cold", "A-stab2", "A-eos", "A-canvas12", "A-one-step", "A-tmin0",
          "B-base", "B-stab0", "B-canvas4", "B-canvas16", "B-eos-later", "C-partial-canvas", "C-canvas6-cold",
          "C-mixed"]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_runs_through_ripple_generate(golden, cases, name, tmp_path, capsys):
    case = cases[name]
    p = case["params"]
    trace = tmp_path / "trace.jsonl"
    argv = ["generate", "--model", str(golden / NAME), "--decoder", "renoise", "--gen-length", str(p["max_new_tokens"]),
            "--block-length", str(p["canvas_length"]), "--seed", str(case["seed"]), "--device", "cpu",
            "--input-ids", ",".join(map(str, case["prompt"])), "--json", "--trace", str(trace)]
    for s in _sets(case):
        argv += ["--set", s]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["tokens"] == case["generated"]
    assert record["nfe"] - record["encoder_nfe"] == case["decoder_forwards"]
    assert record["encoder_nfe"] == case["encoder_forwards"]
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    steps = [e for e in events if e["phase"] == "step"]
    encodes = [e for e in events if e["phase"] == "encode"]
    assert [e["tokens"] for e in encodes] == [c["n_tokens"] for c in case["encoder_calls"]]
    assert len(steps) == len(case["steps_log"])
    for got, want in zip(steps, case["steps_log"]):
        assert got["canvas"] == want["canvas"] and got["input"] == want["input_canvas"]
        assert got["argmax"] == want["argmax"] and got["sampled"] == want["sampled"]
        assert sorted(got["accepted"]) == sorted(want["accepted_positions"])
        assert got["redraw"] == want["renoise_draw"]
        assert (got["stable"], got["confident"], got["stop"]) == (want["stable"], want["confident"], want["stop"])
        assert got["temperature"] == pytest.approx(want["temperature"], abs=0, rel=1e-7)
    # a canvas that ends by the stop rule ends early, the others at the step limit
    assert [sum(1 for e in steps if e["canvas"] == k) for k in range(case["n_canvases"])] == case["steps_per_canvas"]


def test_cache_none_and_batches_with_other_seeds_give_the_same_tokens(gemma, cases):
    """Every public run with the encoder recomputed from scratch, and inside a batch with the other two
    prompts under other seeds (the run's row at each place in turn): the reference's tokens, NFE alike."""
    engine = Engine.from_loaded(gemma)
    prompts = {c["prompt"][0]: c["prompt"] for c in cases.values()}  # the three public prompts
    for i, (name, case) in enumerate(cases.items()):
        alone = _run(engine, case, [case["prompt"]], [case["seed"]], cache="none")[0]
        assert list(alone.tokens) == case["generated"], name
        assert alone.nfe - alone.encoder_nfe == case["decoder_forwards"]
        others = [p for p in prompts.values() if p != case["prompt"]]
        at = i % 3
        batch = others[:at] + [case["prompt"]] + others[at:]
        seeds = [case["seed"] + 1 + j for j in range(3)]
        seeds[at] = case["seed"]
        outs = _run(engine, case, batch, seeds)
        assert list(outs[at].tokens) == case["generated"], name
        assert outs[at].nfe == alone.nfe and outs[at].encoder_nfe == case["encoder_forwards"]
        if i < 3:  # the other rows equal their single runs
            for j in (j for j in range(3) if j != at):
                single = _run(engine, case, [batch[j]], [seeds[j]])[0]
                assert outs[j].tokens == single.tokens and outs[j].nfe == single.nfe


def test_a_seed_decides_the_tokens(gemma, cases):
    engine = Engine.from_loaded(gemma)
    case = cases["A-base"]
    a, b = (_run(engine, case, [case["prompt"]], [case["seed"]])[0] for _ in range(2))
    other = _run(engine, case, [case["prompt"]], [case["seed"] + 1])[0]
    assert a.tokens == b.tokens and other.tokens != a.tokens


def test_model_defaults_come_from_generation_config(golden, capsys):
    """Settings not given with --set are the model's generation_config.json's (tiny: 12 steps, bound 0.5...)."""
    argv = ["generate", "--model", str(golden / NAME), "--decoder", "renoise", "--gen-length", "16",
            "--block-length", "8", "--input-ids", "5,6,7", "--set", "steps=3", "--json", "--device", "cpu"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["params"] == {"steps": 3, "t_max": 0.8, "t_min": 0.4, "entropy_bound": 0.5, "stability": 1,
                                "confidence": 0.5}
    assert record["cache"] == "prefix" and record["seed"] == 0 and len(record["tokens"]) == 16


def test_mask_decoders_and_renoise_refuse_each_others_families(golden, gemma, capsys):
    refused_in_one_line(capsys, golden / NAME, "decoder 'confidence' decodes mask-noise families; diffusion_gemma is "
                        "a uniform-noise family: use a uniform-noise decoder (renoise)", decoder="confidence")
    refused_in_one_line(capsys, golden / "llada-tiny", "decoder 'renoise' decodes uniform-noise families; llada is a "
                        "mask-noise family: use a mask-noise decoder (default, ", decoder="renoise")
    with pytest.raises(RippleError, match="decoder 'default' decodes mask-noise families; diffusion_gemma is a "
                                          "uniform-noise family"):
        Engine.from_loaded(gemma).generate([[5, 6]], build("default"), GenerationConfig(8, 8))
    assert main(["generate", "--model", str(golden / NAME), "--decoder", "renoise", "--cache", "dual",
                 "--input-ids", "5", "--gen-length", "8", "--block-length", "8"]) == 2
    assert "does not support cache 'dual'; supported: prefix, none" in capsys.readouterr().err


def test_a_whole_canvas_past_gen_length_is_decoded(gemma, cases):
    """gen_length 10 with canvases of 8 decodes two whole canvases and returns all 16 tokens (C-partial-canvas)."""
    case = cases["C-partial-canvas"]
    out = _run(Engine.from_loaded(gemma), case, [case["prompt"]], [case["seed"]])[0]
    assert len(out.tokens) == 16 == out.gen_length and list(out.tokens) == case["generated"]
    assert torch.is_tensor(torch.tensor(out.tokens))


def test_ripple_eval_seeds_each_example_from_seed_and_id(golden, tmp_path, capsys):
    from ripple.platform.experiments.evaluate import sample_seed
    from tests.platform.runtime.checkpoints import gemma_with_tokenizer

    model = gemma_with_tokenizer(golden, tmp_path / "dg")
    out = tmp_path / "samples.jsonl"
    argv = ["eval", "--model", str(model), "--task", "arith", "--limit", "2", "--decoder", "renoise", "--set", "steps=2",
            "--gen-length", "8", "--block-length", "4", "--seed", "5", "--samples-out", str(out), "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["seed"] == 5 and summary["cache"] == "prefix" and summary["n"] == 2
    samples = [json.loads(line) for line in out.read_text().splitlines()]
    assert [s["seed"] for s in samples] == [sample_seed(5, s["sample_id"]) for s in samples]
    assert all(s["encoder_nfe"] == 2 and s["nfe"] > 2 for s in samples)


def test_a_generated_image_token_is_text_under_every_cache(golden, gemma, tmp_path, capsys, monkeypatch):
    """Seed 57 samples the image token id (config's image_token_id) inside the first canvas; with the
    encoder recomputed from scratch (cache none) that canvas is re-encoded behind the prompt, and it is
    the model's own text, not a prompt: both caches decode, with the same tokens and the golden rules'
    NFE (every decoder forward of the trace, plus one encoder pass for the prompt and one per canvas
    that another canvas follows). A prompt holding the image token is refused in one line before any
    weights load."""
    image = gemma.config["image_token_id"]
    runs = {}
    for cache in ("none", "prefix"):
        trace = tmp_path / f"{cache}.jsonl"
        argv = ["generate", "--model", str(golden / NAME), "--decoder", "renoise", "--gen-length", "16",
                "--block-length", "8", "--seed", "57", "--input-ids", "5,17,40,9", "--cache", cache, "--device", "cpu",
                "--json", "--trace", str(trace)]
        assert main(argv) == 0, capsys.readouterr().err
        record = json.loads(capsys.readouterr().out)
        steps = [e for e in map(json.loads, trace.read_text().splitlines()) if e["phase"] == "step"]
        canvases = sorted({e["canvas"] for e in steps})
        assert canvases == [0, 1] and all(sum(e["canvas"] == k for e in steps) <= 12 for k in canvases)
        assert record["encoder_nfe"] == len(canvases) and record["nfe"] == len(steps) + record["encoder_nfe"]
        runs[cache] = record
    assert image in runs["prefix"]["tokens"][:8]
    assert runs["none"]["tokens"] == runs["prefix"]["tokens"] and runs["none"]["nfe"] == runs["prefix"]["nfe"]

    import ripple.platform.runtime.loading as loading

    def no_weights(*args, **kwargs):
        raise AssertionError("the weights were loaded before the prompt was checked")

    monkeypatch.setattr(loading, "load_model", no_weights)
    for cache in ("none", "prefix"):
        argv = ["generate", "--model", str(golden / NAME), "--decoder", "renoise", "--gen-length", "16",
                "--block-length", "8", "--input-ids", f"5,{image},9", "--cache", cache, "--device", "cpu"]
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert f"diffusion_gemma: the prompt holds the image token {image}; images are not supported" in captured.err
