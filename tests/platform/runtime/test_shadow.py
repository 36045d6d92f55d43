"""The shadow segment (WINO's leave-one-out verification) of the packed forward: an all-mask
copy of the block whose row predicting block position j cannot see the token at j, for every
cache policy and both families (Dream reads the prediction for j at j-1, so its first block
position, committed at the block opening, has no shadow row)."""
import pytest
import torch

from tests.platform.runtime.canvases import L, engine, mid_block_canvas  # noqa: F401 (engine: the fixture)


def _canvas(engine):
    return mid_block_canvas(engine, gen=24)


def _run(engine, canvas, positions, pad, bs, cache, *, shadow=True, variants=None):
    """Block logits [n, V], variant logits [m, n, V] or None, shadow logits [n, V] or None, for the
    n = L - shift block positions that have rows (position j's at row j - shift)."""
    N = canvas.shape[1]
    lo, hi = bs, bs + L
    w0, w1 = {"none": (0, N), "prefix": (lo, N), "dual": (lo, hi)}[cache]
    kv = None
    if cache != "none":  # a cache built on this very canvas: exact, so every policy must agree
        _, kv = engine.forward_full(canvas, positions, pad, torch.arange(lo, lo + L) - engine.shift, True)
    Tw, n = w1 - w0, L - engine.shift
    m = 0 if variants is None else variants.shape[0]
    rows = [torch.arange(lo - w0, lo - w0 + n)]
    if m:
        rows.append((Tw + torch.arange(m)[:, None] * L + torch.arange(n)[None]).reshape(-1))
    if shadow:
        rows.append(Tw + m * L + torch.arange(n))
    packed = variants[None] if m else None  # [1, m, L]
    out = engine.forward_window(canvas, positions, pad, kv, w0, w1, lo, hi, packed, torch.cat(rows), shadow=shadow)[0]
    return out[:n], (out[n:(1 + m) * n].reshape(m, n, -1) if m else None), (out[(1 + m) * n:] if shadow else None)


def test_shadow_matches_explicit_mask(engine):
    """cache=none: shadow logits equal a forward over [canvas ; all-mask block copy] with the rule's mask."""
    canvas, positions, pad, bs = _canvas(engine)
    N, s = canvas.shape[1], engine.shift
    lo, hi = bs, bs + L
    _, _, shadow = _run(engine, canvas, positions, pad, bs, "none")
    seq = torch.cat((canvas, torch.full((1, L), engine.mask_id)), 1)
    pos = torch.cat((positions, positions[:, lo:hi]), 1)
    mask = torch.zeros(N + L, N + L, dtype=torch.bool)
    mask[:N, :N] = True  # the canvas never sees the shadow
    mask[N:, :N] = True
    mask[N:, N:] = True
    for t in range(L - s):  # shadow row t (position bs + t) predicts block position t + shift: hide it
        mask[N + t, bs + t + s] = False
    out = engine.model(seq, pos, attn_mask=mask[None, None]).logits[0, N:N + L - s]
    assert (out - shadow).abs().max() < 1e-4


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_shadow_is_invisible_and_cache_orthogonal(engine, cache):
    canvas, positions, pad, bs = _canvas(engine)
    plain, _, _ = _run(engine, canvas, positions, pad, bs, cache, shadow=False)
    block, _, shadow = _run(engine, canvas, positions, pad, bs, cache)
    assert (block - plain).abs().max() < 1e-4  # block queries never see the shadow
    _, _, reference = _run(engine, canvas, positions, pad, bs, "none")
    assert (shadow - reference).abs().max() < 1e-4  # same rule over cached keys


@pytest.mark.parametrize("cache", ["none", "dual"])
def test_shadow_and_variants_in_one_forward(engine, cache):
    """Segments are isolated from each other: packing both changes neither."""
    canvas, positions, pad, bs = _canvas(engine)
    variants = canvas[0, bs:bs + L][None].repeat(2, 1)
    variants[0, 1], variants[1, 4] = 7, 9
    block, var, shadow = _run(engine, canvas, positions, pad, bs, cache, variants=variants)
    _, var_alone, _ = _run(engine, canvas, positions, pad, bs, cache, shadow=False, variants=variants)
    _, _, shadow_alone = _run(engine, canvas, positions, pad, bs, cache)
    assert (var - var_alone).abs().max() < 1e-4
    assert (shadow - shadow_alone).abs().max() < 1e-4

