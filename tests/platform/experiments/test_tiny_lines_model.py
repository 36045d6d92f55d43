"""The shipped ripple-tiny-lines checkpoint (llada family, full attention): loads through the public
loader, every name of the lines tasks is one token of its tokenizer, it does its operations, and every
decoder x cache keeps the shared invariants on it."""
import json

import pytest

from ripple.decoders import build, decoders_for
from ripple.platform.experiments.evaluate import evaluate_cell
from ripple.platform.runtime.engine import GenerationConfig
from ripple.platform.runtime.loading import EMBEDDED, load_model
from ripple.tasks import get_task
from ripple.tasks.lines import NAMES
from ripple.testing import check_decoder_on_model
from tests.decoders.test_invariants import CACHES, TINY_DECODERS, decoder


@pytest.fixture(scope="module")
def lines_model():
    return load_model("ripple-tiny-lines", "float32", "cpu")


def test_checkpoint_is_small_full_attention_llada_with_a_card(lines_model):
    path = EMBEDDED["ripple-tiny-lines"]
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "llada" and (path / "README.md").exists()
    assert (path / "model.safetensors").stat().st_size <= 8 * 2**20
    assert lines_model.model_type == "llada" and not lines_model.model.block_causal and lines_model.shift == 0
    tok = lines_model.tokenizer
    assert all(len(tok(n, add_special_tokens=False)["input_ids"]) == 1 for n in NAMES)


@pytest.mark.slow
def test_the_shipped_model_does_its_operations(lines_model):
    """A floor far below the card's measured accuracies (200 problems each): the weights are the trained ones."""
    for task in ("lines/copy", "lines/shuffle"):
        cell = evaluate_cell(lines_model, get_task(task), build("default"), GenerationConfig(32, 32), limit=8,
                             progress=False)
        assert cell.accuracy >= 60, (task, cell.accuracy)


@pytest.mark.slow
@pytest.mark.parametrize("cache", CACHES)
def test_every_decoder_and_cache_keeps_the_invariants(lines_model, cache):
    prompts = [lines_model.tokenizer(get_task(t).example("test", 0).prompt, add_special_tokens=False)["input_ids"]
               for t in ("lines/shuffle", "lines/insert_random")]
    assert {n for n, _ in TINY_DECODERS} == set(decoders_for("mask"))
    for name, settings in TINY_DECODERS:
        check_decoder_on_model(lambda: decoder(name, settings), lines_model, caches=[cache], prompts=prompts)
