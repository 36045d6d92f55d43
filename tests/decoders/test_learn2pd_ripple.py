"""`learn2pd` with a filter of Ripple's recipe (architecture `ripple`): width-free, fed the features
decoders/features.py computes, the same ones `ripple learn label` stores, on scripted models."""
import pytest
import torch

from ripple.decoders import build
from ripple.decoders.features import KNOWN, assemble, raw_columns
from ripple.decoders.filters import RIPPLE_FEATURES, FilterCard, build_filter, load_filter, save_filter
from ripple.errors import RippleError
from ripple.platform.runtime.engine import GenerationConfig
from ripple.testing import SCRIPTED_PROMPTS, check_decoder, hashed_script, scripted_engine


def _save_ripple(tmp_path, *, accept_bias: float = 0.0, hidden: int = 6, window: int = 1, seed: int = 0,
                 features=RIPPLE_FEATURES, name="filter"):
    """A ripple-architecture filter with seeded weights; `accept_bias` shifts every logit (large: accept all)."""
    torch.manual_seed(seed)
    module = build_filter("ripple", None, features=len(features), hidden=hidden, window=window)
    with torch.no_grad():
        module.out.bias.add_(accept_bias)
    card = FilterCard("ripple", None, tuple(features), model="scripted", recipe="ripple", seeds=(seed,), epochs=1)
    save_filter(tmp_path / name, module, card)
    return tmp_path / name


def test_raw_columns_are_confidence_margin_entropy_and_committed():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0], [-3.0, 5.0, 1.0]])  # [L=3, V=3]
    masked = torch.tensor([True, False, True])
    cols = raw_columns(logits, masked)
    p = torch.softmax(logits.double(), dim=-1)  # [3, 3]
    top = p.sort(dim=-1, descending=True).values
    assert torch.allclose(cols["confidence"].double(), top[:, 0], atol=1e-6)
    assert torch.allclose(cols["margin"].double(), top[:, 0] - top[:, 1], atol=1e-6)
    assert torch.allclose(cols["entropy"].double(), -(p * p.log()).sum(-1), atol=1e-6)
    assert cols["entropy"][1].item() == pytest.approx(torch.log(torch.tensor(3.0)).item(), abs=1e-6)  # uniform
    assert cols["is_committed"].tolist() == [False, True, False]


def test_assemble_derives_masks_left_step_and_position_in_the_names_order():
    cols = {"confidence": torch.tensor([[0.5, 0.9, 0.1, 0.3]]), "margin": torch.zeros(1, 4),
            "entropy": torch.ones(1, 4), "is_committed": torch.tensor([[True, False, False, True]])}
    X = assemble(("position", "is_committed", "masks_left", "step", "confidence"), cols, [3])  # [1, 4, 5]
    assert X.shape == (1, 4, 5)
    assert X[0, :, 0].tolist() == [0.0, 0.25, 0.5, 0.75]
    assert X[0, :, 1].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert X[0, :, 2].tolist() == [0.5] * 4 and X[0, :, 3].tolist() == [3.0] * 4
    assert torch.equal(X[0, :, 4], cols["confidence"][0])
    assert set(RIPPLE_FEATURES) <= set(KNOWN)


def test_left_features_see_what_is_still_open_before_each_position():
    cols = {"confidence": torch.tensor([[0.5, 0.9, 0.1, 0.3, 0.7]]),
            "is_committed": torch.tensor([[True, False, False, True, False]])}
    X = assemble(("left_masked", "left_min_confidence"), cols, [0])  # [1, 5, 2]
    assert X[0, :, 0].tolist() == pytest.approx([0.0, 0.0, 0.2, 0.4, 0.4])  # masked positions before j, over B
    # the lowest confidence among the masked positions before j (committed ones do not count), 1 where none
    assert X[0, :, 1].tolist() == pytest.approx([1.0, 1.0, 0.9, 0.1, 0.1])


def test_one_width_free_filter_serves_block_16_and_32(tmp_path):
    path = _save_ripple(tmp_path, accept_bias=50.0)  # accepts every masked position
    for block in (16, 32):
        loaded = load_filter(path, block_length=block)  # no refusal: the card has no block length
        assert loaded.card.block_length is None
        engine, model = scripted_engine("full", hashed_script(40))
        events = []
        out = engine.generate([list(SCRIPTED_PROMPTS[0])], build("learn2pd", {"filter": str(path)}),
                              GenerationConfig(2 * block, block, "none"), trace=events.append)[0]
        steps = [e for e in events if e["phase"] == "step"]
        # everything accepted: each block is committed whole by its first forward
        assert out.nfe == 2 and [len(e["committed"]) for e in steps] == [block, block]
        assert [e["accepted"] for e in steps] == [block, block]
        assert 39 not in out.tokens and len(out.tokens) == 2 * block


def test_a_rejecting_filter_leaves_learn2pds_floor(tmp_path):
    path = _save_ripple(tmp_path, accept_bias=-50.0)  # accepts nothing: LLaDA's generate (filter=none)
    cfg = GenerationConfig(16, 8, "none")
    outs = []
    for settings in ({"filter": str(path)}, {"filter": "none"}):
        engine, _ = scripted_engine("full", hashed_script(40))
        outs.append(engine.generate([list(SCRIPTED_PROMPTS[1])], build("learn2pd", settings), cfg)[0])
    assert (outs[0].tokens, outs[0].nfe) == (outs[1].tokens, outs[1].nfe) and outs[0].nfe == 16


def test_a_ripple_filter_keeps_every_decoder_invariant_on_every_cache(tmp_path):
    path = _save_ripple(tmp_path, accept_bias=0.3)
    check_decoder(lambda: build("learn2pd", {"filter": str(path), "threshold": "0.5"}), families=("full", "shifted"))
    check_decoder(lambda: build("learn2pd", {"filter": str(path), "threshold": "0.5", "eot": "true"}),
                  families=("full",), caches=("none", "dual"))


def test_the_decoder_feeds_the_filter_what_labelling_stores(tmp_path):
    """The labelling run and learn2pd with a filter that accepts nothing (LLaDA's generate, whose answer the
    labelling run writes) see the same canvas at each block's first forward: there the decoder's filter
    input equals the labelling file's columns assembled as training assembles them, bit for bit."""
    from ripple.platform.experiments.labels import Labeller, trace_records, write_records
    from ripple.platform.runtime.tracing import Trace
    from ripple.platform.training.learn import ripple_inputs, read_records

    path = _save_ripple(tmp_path, accept_bias=-50.0)
    cfg = GenerationConfig(24, 8, "none")
    prompt = list(SCRIPTED_PROMPTS[2])
    engine, _ = scripted_engine("full", hashed_script(40))
    events = []
    engine.generate([prompt], Labeller(), cfg, trace=events.append)
    records = trace_records("s0", Trace.from_events(events).dumps())
    assert records and {r.block for r in records} == {0, 1, 2}
    write_records(records, tmp_path / "labels.parquet", {})
    recs = read_records(tmp_path / "labels.parquet")
    assert set(recs.extra) == {"margin", "entropy", "is_committed"}
    X, _, masked = ripple_inputs(recs, range(recs.n))  # [n, 8, F]
    openings = {r.block: i for i, r in reversed(list(enumerate(records))) if r.step == 0}

    loaded = load_filter(path)
    seen = []
    real = loaded.module.forward
    loaded.module.forward = lambda x: (seen.append(x.clone()), real(x))[1]  # [1, B, F] per forward
    try:
        engine, _ = scripted_engine("full", hashed_script(40))
        steps = []
        engine.generate([prompt], build("learn2pd", {"filter": str(path)}), cfg,
                        trace=lambda e: steps.append(e) if e["phase"] == "step" else None)
    finally:
        del loaded.module.forward
    assert len(seen) == len(steps) == 24
    firsts = [i for i, e in enumerate(steps) if e["step"] == 0]
    assert len(firsts) == 3
    for block, i in enumerate(firsts):
        assert torch.equal(seen[i][0], X[openings[block]])
        assert masked[openings[block]].all()  # nothing committed at a block's first forward
    # later forwards: the decoder's committed column follows its own commits
    assert seen[firsts[0] + 3][0, :, RIPPLE_FEATURES.index("is_committed")].sum() == 3


def test_a_filter_reading_an_unknown_feature_is_refused_in_one_line(tmp_path):
    path = _save_ripple(tmp_path, features=("confidence", "novelty"))
    engine, _ = scripted_engine("full", hashed_script(40))
    with pytest.raises(RippleError, match=r"reads feature novelty, which this Ripple does not compute; known: "):
        engine.generate([[5, 6]], build("learn2pd", {"filter": str(path)}), GenerationConfig(8, 4, "none"))
