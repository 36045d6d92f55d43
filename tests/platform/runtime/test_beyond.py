"""The next block's rows (for decoders with `needs_rows_beyond_block`, KLASS): window rows
where the recomputed window covers them, else (dual cache) a copy of the next block that sees
what a block query sees with its own copy in place of the canvas next block."""
import pytest
import torch

from ripple.decoders import build
from ripple.platform.runtime.engine import Engine, GenerationConfig
from tests.platform.runtime.canvases import L, engine, mid_block_canvas  # noqa: F401 (engine: the fixture)


def _canvas(engine):
    return mid_block_canvas(engine, gen=32)


def _beyond(engine, canvas, positions, pad, bs, cache, segment=None):
    """(block rows [n, V], next-block rows [L, V]) as the engine requests them."""
    N, s = canvas.shape[1], engine.shift
    be = bs + L
    w0, w1 = {"none": (0, N), "prefix": (bs, N), "dual": (bs, be)}[cache]
    kv = None
    if cache != "none":  # built on this very canvas: exact, so every policy must agree
        _, kv = engine.forward_full(canvas, positions, pad, torch.arange(bs, be) - s, True)
    c = torch.arange(L) + be - s  # canvas rows predicting the next block
    inside = c < w1 if segment is None else torch.zeros(L, dtype=torch.bool)
    span = None if bool(inside.all()) else (be, be + L)
    Tw = w1 - w0
    rows = torch.cat((torch.arange(bs - w0, bs - w0 + L - s), torch.where(inside, c - w0, Tw + c - be)))
    out = engine.forward_window(canvas, positions, pad, kv, w0, w1, bs, be, None, rows, beyond=span)[0]
    return out[:L - s], out[L - s:], span


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_next_block_rows_equal_the_full_forward_and_leave_the_block_alone(engine, cache):
    canvas, positions, pad, bs = _canvas(engine)
    s, be = engine.shift, bs + L
    block, nxt, span = _beyond(engine, canvas, positions, pad, bs, cache)
    assert (span is not None) == (cache == "dual")  # only the dual window lacks the next block
    want = torch.cat((torch.arange(bs + s, be), torch.arange(be, be + L))) - s  # block rows, next-block rows
    full, _ = engine.forward_full(canvas, positions, pad, want, False)
    assert (nxt - full[0, L - s:]).abs().max() < 1e-4
    assert (block - full[0, :L - s]).abs().max() < 1e-4  # block queries never see the copy


def test_next_block_copy_matches_explicit_mask(engine):
    """The copy's rule on its own (cache none, copy forced): [canvas ; next block copy], the copy
    seeing the canvas minus the canvas next block, plus itself (seeing both would count the
    next block twice)."""
    canvas, positions, pad, bs = _canvas(engine)
    N, s, be = canvas.shape[1], engine.shift, bs + L
    _, nxt, span = _beyond(engine, canvas, positions, pad, bs, "none", segment=True)
    assert span == (be, be + L)
    seq = torch.cat((canvas, canvas[:, be:be + L]), 1)
    pos = torch.cat((positions, positions[:, be:be + L]), 1)
    mask = torch.zeros(N + L, N + L, dtype=torch.bool)
    mask[:N, :N] = True
    mask[N:, :N] = True
    mask[N:, be:be + L] = False
    mask[N:, N:] = True
    out = engine.model(seq, pos, attn_mask=mask[None, None]).logits[0, N:N + L]
    assert (out[:L - s] - nxt[s:]).abs().max() < 1e-4


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_klass_runs_the_next_block_rows_through_every_policy(engine, cache):
    cfg = GenerationConfig(32, 8, cache)
    prompts = [[12, 40, 77, 3, 90, 15], [5, 9, 33]]
    klass = build("klass", {"tau": "0.2", "kappa": "1.0"})
    batch = engine.generate(prompts, klass, cfg)
    singles = [engine.generate([p], build("klass", {"tau": "0.2", "kappa": "1.0"}), cfg)[0] for p in prompts]
    assert [b.tokens for b in batch] == [x.tokens for x in singles] and [b.nfe for b in batch] == [x.nfe for x in singles]
    assert all(engine.mask_id not in b.tokens for b in batch)
