"""The shipped ripple-tiny-bd checkpoint (llada2_moe, block diffusion): loads through the public
loader as LLaDA2.x does, solves its tasks, and every decoder x cache keeps the shared invariants on it."""
import json

import pytest

from ripple.decoders import build, decoders_for
from ripple.platform.experiments.evaluate import evaluate_cell
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.platform.runtime.loading import EMBEDDED, load_model
from ripple.tasks import get_task
from tests.decoders.test_editing import EDITING, check_editing
from ripple.testing import CountedModel as Counted
from ripple.testing import check_invariants
from tests.decoders.test_invariants import CACHES, TINY_DECODERS, decoder

L = 16


@pytest.fixture(scope="module")
def bd():
    return load_model("ripple-tiny-bd", "float32", "cpu")


def test_checkpoint_is_a_small_llada2_moe_model_with_a_card(bd):
    path = EMBEDDED["ripple-tiny-bd"]
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "llada2_moe" and cfg["architectures"] == ["LLaDA2MoeModelLM"]
    assert cfg["first_k_dense_replace"] == 1 and cfg["num_shared_experts"] >= 1 and cfg["n_group"] > cfg["topk_group"]
    assert (path / "model.safetensors").stat().st_size <= 25 * 2**20 and (path / "README.md").exists()
    assert bd.model_type == "llada2_moe" and bd.model.block_causal and bd.model.stops_at_eos
    assert bd.model.cfg.moe.n_experts == cfg["num_experts"] and bd.model.cfg.dense_layers == 1
    assert bd.mask_id == bd.tokenizer.mask_token_id and bd.tokenizer.eos_token_id in bd.eos_ids


@pytest.mark.slow
def test_the_shipped_model_solves_its_tasks(bd):
    """A floor far below the card's measured accuracies (200 problems each): the weights are the trained ones."""
    for task in ("arith", "pyfunc", "freefunc"):
        cell = evaluate_cell(bd, get_task(task), build("default"), GenerationConfig(48, L), limit=10, progress=False)
        assert cell.accuracy >= 50, (task, cell.accuracy)


def _prompts(bd):
    ex = [get_task(t).example("test", i) for t, i in (("arith", 0), ("freefunc", 1))]
    return [bd.tokenizer(e.prompt, add_special_tokens=False)["input_ids"] for e in ex]


@pytest.mark.slow
@pytest.mark.parametrize("cache", CACHES)
def test_every_decoder_and_cache_keeps_the_invariants_on_ripple_tiny_bd(bd, cache):
    prompts = _prompts(bd)
    # one block's worth of response: with each prompt's tail it spans two blocks (the prompts are not
    # block-aligned), so every rule and cache still crosses a block boundary
    cfg = GenerationConfig(gen_length=L, block_length=L, cache=cache)
    assert all(len(p) % L for p in prompts)
    settings = list(dict.fromkeys((n, tuple(s.items())) for n, s in TINY_DECODERS + EDITING))
    assert {n for n, _ in settings} == set(decoders_for("mask", cache))  # every decoder of mask families and this cache
    for name, items in settings:
        s = dict(items)
        singles = []
        for p in prompts:
            model = Counted(bd.model)
            engine = Engine(model, mask_id=bd.mask_id, eos_ids=bd.eos_ids, pad_id=bd.pad_id)
            events = []
            out = engine.generate([p], decoder(name, s, block_length=L), cfg, trace=events.append)[0]
            lead = len(p) % L
            own = model.calls - (out.reference_nfe or 0)  # a follower's (the oracle's) reference run came first
            if "edit_tau" in s:
                check_editing(out, events, own, block_length=L, lead=lead, mask=bd.mask_id,
                              max_post=int(s["max_post_steps"]))
            else:  # `cut`: a decoder that cuts the canvas (learn2pd's EoT)
                check_invariants(out, events, own, blocks=None, block_length=L, shift=0, mask=bd.mask_id,
                                 lead=lead, max_blocks=-(-(len(p) + cfg.gen_length) // L) - len(p) // L,
                                 eos=bd.eos_ids, cut=len(out.tokens) < cfg.gen_length)
            singles.append(out)
        batch = Engine(bd.model, mask_id=bd.mask_id, eos_ids=bd.eos_ids, pad_id=bd.pad_id).generate(
            prompts, decoder(name, s, block_length=L), cfg)
        assert [(b.tokens, b.nfe, b.edits) for b in batch] == [(o.tokens, o.nfe, o.edits) for o in singles], name
