"""train-tiny's qwen2 presets (ripple-tiny-ar): a causal LM on ripple-tiny's tokenizer whose checkpoint loads
in Ripple's qwen2 family and in transformers' Qwen2ForCausalLM alike, trained on answers after their prompts,
resumable to the same bytes."""
import json

import pytest
import torch
from safetensors.torch import load_file

from ripple.platform.runtime.causal import next_token_logits
from ripple.platform.runtime.loading import EMBEDDED, load_causal
from ripple.platform.training.train import PRESETS, Batcher, recipe, train


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    out = tmp_path_factory.mktemp("ar") / "m"
    summary = train(PRESETS["micro-ar"](str(out), steps=20), progress=False)
    return out, summary


def test_micro_ar_lowers_the_loss_and_loads_in_ripple_and_transformers(micro):
    from transformers import Qwen2ForCausalLM

    out, summary = micro
    curve = json.loads((out / "training" / "curve.json").read_text())
    assert sum(c["loss"] for c in curve[-2:]) < 0.8 * sum(c["loss"] for c in curve[:2]), curve
    assert summary["final_loss"] == curve[-1]["loss"]
    tiny = EMBEDDED["ripple-tiny"]
    tiny_cfg = json.loads((tiny / "config.json").read_text())
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["architectures"] == ["Qwen2ForCausalLM"]
    assert (cfg["vocab_size"], cfg["eos_token_id"], cfg["pad_token_id"]) == (
        tiny_cfg["vocab_size"], tiny_cfg["eos_token_id"], tiny_cfg["pad_token_id"])
    for name in ("tokenizer.json", "tokenizer_config.json"):  # ripple-tiny's, byte for byte
        assert (out / name).read_bytes() == (tiny / name).read_bytes()
    assert "model.layers.0.self_attn.q_proj.bias" in load_file(out / "model.safetensors")
    ours = load_causal(str(out), "float32", "cpu")
    theirs = Qwen2ForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    ids = torch.randint(0, cfg["vocab_size"], (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = theirs(ids).logits
    assert float((next_token_logits(ours, ids) - want).abs().max()) <= 1e-5
    # Ripple reads the copied tokenizer as ripple-tiny's (transformers' AutoTokenizer would impose Qwen2Tokenizer)
    assert len(ours.tokenizer) == cfg["vocab_size"] and ours.eos_ids == (tiny_cfg["eos_token_id"],)
    text = "Write a function g(s) that returns the length of s plus 54.\n"
    assert ours.tokenizer(text)["input_ids"] == load_causal(str(out), "float32", "cpu").tokenizer(text)["input_ids"]
    from ripple.platform.runtime.loading import load_tokenizer

    assert ours.tokenizer(text)["input_ids"] == load_tokenizer(tiny)(text)["input_ids"]


def test_the_causal_batch_scores_answers_and_eos_after_their_prompts():
    from ripple.platform.runtime.loading import load_tokenizer

    cfg = recipe("-", preset="micro-ar", batch_size=4)
    tok = load_tokenizer(EMBEDDED["ripple-tiny"])
    b = Batcher(cfg, tok, mask_id=3, eos_id=2, pad_id=0)
    tokens, scored = b.causal_batch(5)  # [4, T] each
    for row in range(4):
        prompt, answer = b.texts(5 * 4 + row)
        n = len(prompt) + len(answer) + 1
        assert tokens[row, :n].tolist() == prompt + answer + [2]
        assert (tokens[row, n:] == 0).all()
        assert scored[row].nonzero().flatten().tolist() == list(range(len(prompt), n))
    assert tokens.shape[1] == max(len(p) + len(a) + 1 for p, a in (b.texts(20 + r) for r in range(4)))


def test_an_interrupted_ar_run_resumes_to_the_same_weights(tmp_path):
    cfg = PRESETS["micro-ar"](str(tmp_path / "a"), steps=12, checkpoint_every=4)
    part = train(cfg, progress=False, stop_at=6)
    assert part["stopped"] and not (tmp_path / "a" / "model.safetensors").exists()
    train(cfg, progress=False)
    train(PRESETS["micro-ar"](str(tmp_path / "b"), steps=12, checkpoint_every=4), progress=False)
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_greedy_eval_decodes_as_transformers_generate(micro):
    from transformers import Qwen2ForCausalLM

    from ripple.platform.training.causal_eval import evaluate_task, greedy

    out, _ = micro
    ours = load_causal(str(out), "float32", "cpu")
    theirs = Qwen2ForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    prompt = ours.tokenizer("Write a function f of one number that returns it times 5 plus 9.\n")["input_ids"]
    written = greedy(ours, prompt, 12)
    with torch.no_grad():
        ref = theirs.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=2,
                              pad_token_id=0)[0, len(prompt):].tolist()
    assert written == ref[:len(written)] and (len(written) == 12 or written[-1] == 2)
    report = evaluate_task(ours, "pyfunc", 2)
    assert report.problems == 2 and 0 <= report.next_token_accuracy <= 1 and report.tokens > 2
