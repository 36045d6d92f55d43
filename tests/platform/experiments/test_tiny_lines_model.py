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
from ripple.tasks.lines import EMPTY, NAMES, OPS
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
    assert all(len(tok(n, add_special_tokens=False)["input_ids"]) == 1 for n in NAMES + (EMPTY,))


def test_place_k_is_a_fixed_distance_from_the_answers_kth_name(lines_model):
    """Every prompt of an operation is the same number of tokens whatever the line's length, its places
    three tokens each as the answer's names are: place k's name and the answer's k-th name are a fixed
    distance apart (the layout the model learnt on, docs/tasks.md)."""
    tok = lines_model.tokenizer
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    for op in OPS:
        examples = get_task(f"lines/{op.name}").examples("test", 40)
        assert len({len(ids(ex.prompt)) for ex in examples}) == 1, op.name
        for ex in examples:
            line = json.loads(ex.answer)["input"] if op.kind == "shuffle" or op.random_place else None
            p, r = ids(ex.prompt), ids(ex.reference)
            names = [tok.convert_ids_to_tokens(i) for i in p[-18:]]  # the six places before the newline
            assert [names[3 * k + 1] for k in range(6)][:len(line or [])] == (line or [])
            answer = json.loads(ex.reference)
            assert [tok.convert_ids_to_tokens(r[1 + 3 * k]) for k in range(len(answer))] == answer


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
    assert {n for n, _ in TINY_DECODERS} == set(decoders_for("mask", cache))
    for name, settings in TINY_DECODERS:
        check_decoder_on_model(lambda: decoder(name, settings, block_length=4), lines_model, caches=[cache],
                               prompts=prompts, gen_length=8, block_length=4)  # two blocks: a boundary crossed
