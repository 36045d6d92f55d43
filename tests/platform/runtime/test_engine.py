"""Engine behaviour on the real tiny checkpoints: batching, caches, timing fields."""
import pytest

from ripple.decoders import build
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.platform.runtime.loading import load_model

PROMPTS = [[51, 109, 11, 50, 61, 38, 2, 148, 115, 60, 89, 125], [31, 108, 112, 68, 49], [7, 8, 9, 10, 11, 12, 13, 14]]


@pytest.mark.parametrize("name", ["llada-tiny", "dream-tiny"])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize("decoder,settings", [("default", {}), ("confidence", {"tau": "0.3"})])
def test_batch_of_three_equals_single_runs(golden, name, cache, decoder, settings):
    engine = Engine.from_loaded(load_model(str(golden / name), "float32", "cpu"))
    cfg = GenerationConfig(16, 8, cache)
    batch = engine.generate(PROMPTS, build(decoder, settings), cfg)
    singles = [engine.generate([p], build(decoder, settings), cfg)[0] for p in PROMPTS]
    assert [b.tokens for b in batch] == [s.tokens for s in singles]
    assert [b.nfe for b in batch] == [s.nfe for s in singles]
    for b in batch:
        assert b.decode_seconds > 0 and b.canvas_tps == pytest.approx(16 / b.decode_seconds)


def test_cache_policies_share_the_block_opening_forward(golden):
    """Every policy runs the same first forward, so the first block's first commit agrees."""
    engine = Engine.from_loaded(load_model(str(golden / "llada-tiny"), "float32", "cpu"))
    firsts = set()
    for cache in ("none", "prefix", "dual"):
        events = []
        engine.generate([PROMPTS[0]], build("default"), GenerationConfig(8, 8, cache), trace=events.append)
        firsts.add(tuple(events[0]["committed"][0]))
    assert len(firsts) == 1
