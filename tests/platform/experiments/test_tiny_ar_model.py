"""The shipped ripple-tiny-ar checkpoint (qwen2, causal): an embedded name that loads as a causal LM on
ripple-tiny's vocabulary, refused as a dLLM, loadable by transformers, and trained (it predicts
ripple-tiny's answers)."""
import json

import pytest
import torch

from ripple.errors import RippleError
from ripple.platform.runtime.causal import next_token_logits
from ripple.platform.runtime.loading import EMBEDDED, load_causal, load_model


@pytest.fixture(scope="module")
def ar():
    return load_causal("ripple-tiny-ar", "float32", "cpu")


def test_an_embedded_causal_lm_on_ripple_tinys_vocabulary_with_a_card(ar):
    path, tiny = EMBEDDED["ripple-tiny-ar"], EMBEDDED["ripple-tiny"]
    cfg, tiny_cfg = (json.loads((p / "config.json").read_text()) for p in (path, tiny))
    assert cfg["model_type"] == "qwen2" and (path / "README.md").exists()
    assert (path / "model.safetensors").stat().st_size <= 8 * 2**20
    assert cfg["vocab_size"] == tiny_cfg["vocab_size"] and cfg["eos_token_id"] == tiny_cfg["eos_token_id"]
    assert (path / "tokenizer.json").read_bytes() == (tiny / "tokenizer.json").read_bytes()
    assert ar.causal and ar.mask_id is None and len(ar.tokenizer) == cfg["vocab_size"]
    summary = json.loads((path / "training_summary.json").read_text())
    assert summary["steps"] == summary["config"]["steps"] and summary["config"]["family"] == "qwen2"
    with pytest.raises(RippleError, match="is a causal LM"):
        load_model("ripple-tiny-ar", "float32", "cpu")


def test_transformers_loads_it_with_the_same_logits(ar):
    from transformers import Qwen2ForCausalLM

    theirs = Qwen2ForCausalLM.from_pretrained(str(EMBEDDED["ripple-tiny-ar"]), dtype=torch.float32).eval()
    ids = torch.tensor([ar.tokenizer("Write a function g(s) that returns the length of s plus 54.\n")["input_ids"]])
    with torch.no_grad():
        assert float((next_token_logits(ar, ids) - theirs(ids).logits).abs().max()) <= 1e-5


def test_the_shipped_model_knows_its_tasks(ar):
    """A floor far below the card's measured accuracies: the weights are the trained ones."""
    from ripple.platform.training.causal_eval import evaluate_task

    for task in ("arith", "pyfunc"):
        report = evaluate_task(ar, task, 8)
        assert report.next_token_accuracy >= 0.8 and report.correct >= 0.6, report
