"""The packed lookahead forward: one pass evaluates the anchor plus m block variants
under the visibility rule of DESIGN.md section 3, for every cache policy and family.

Windows and variants start at the block start for both families; a shifted family (Dream)
reads the prediction for block position j at row j - 1, so its first position (committed at
the block opening) has no row."""
import pytest
import torch

from ripple.platform.runtime.engine import Engine
from ripple.platform.runtime.loading import load_model

L = 8


@pytest.fixture(scope="module", params=["llada-tiny", "dream-tiny"])
def engine(request, golden):
    return Engine.from_loaded(load_model(str(golden / request.param), "float32", "cpu"))


def _state(engine, prompt_len=12, gen=24, block=1, decoded=3, seed=0):
    """A canvas mid-way through `block`: earlier blocks and a few block positions decoded."""
    g = torch.Generator().manual_seed(seed)
    N = prompt_len + gen
    canvas = torch.full((1, N), engine.mask_id)
    canvas[0, :prompt_len] = torch.randint(0, 140, (prompt_len,), generator=g)
    bs = prompt_len + block * L
    canvas[0, prompt_len:bs] = torch.randint(0, 140, (bs - prompt_len,), generator=g)
    canvas[0, bs:bs + decoded] = torch.randint(0, 140, (decoded,), generator=g)
    positions = torch.arange(N)[None]
    pad = torch.zeros(1, N, dtype=torch.bool)
    return canvas, positions, pad, bs


def _windows(engine, cache, bs, N):
    lo, hi = bs, bs + L
    return lo, hi, {"none": (0, N), "prefix": (lo, N), "dual": (lo, hi)}[cache]


def _run(engine, canvas, positions, pad, bs, cache, variants_block, opening=None):
    """Block rows [n, V] and variant rows [m, n, V] or None, n = L - shift block positions."""
    N = canvas.shape[1]
    lo, hi, (w0, w1) = _windows(engine, cache, bs, N)
    kv = None
    if cache != "none":
        # block-opening state: the block fully masked, as when the block started
        opening = canvas.clone() if opening is None else opening
        _, kv = engine.forward_full(opening, positions, pad, torch.arange(lo, lo + L) - engine.shift, True)
    Tw, n = w1 - w0, L - engine.shift
    base_rows = torch.arange(lo - w0, lo - w0 + n)
    if variants_block is None:
        return engine.forward_window(canvas, positions, pad, kv, w0, w1, lo, hi, None, base_rows)[0], None
    m = variants_block.shape[0]
    var_rows = (Tw + torch.arange(m)[:, None] * L + torch.arange(n)[None]).reshape(-1)
    out = engine.forward_window(canvas, positions, pad, kv, w0, w1, lo, hi, variants_block[None],
                                torch.cat((base_rows, var_rows)))[0]
    return out[:n], out[n:].reshape(m, n, -1)


def _variants(canvas, bs, engine, m=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    block = canvas[0, bs:bs + L]
    out = block[None].repeat(m, 1)
    masked = (block == engine.mask_id).nonzero().squeeze(-1)
    for j in range(m):  # each variant fills one or two masked positions differently
        out[j, masked[j % len(masked)]] = torch.randint(0, 140, (), generator=g)
        if j % 2:
            out[j, masked[(j + 1) % len(masked)]] = torch.randint(0, 140, (), generator=g)
    return out


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_packed_variants_equal_single_evaluation(engine, cache):
    canvas, positions, pad, bs = _state(engine)
    opening = canvas.clone()
    opening[0, bs:bs + L] = engine.mask_id
    variants = _variants(canvas, bs, engine)
    anchor, packed = _run(engine, canvas, positions, pad, bs, cache, variants, opening)
    plain, _ = _run(engine, canvas, positions, pad, bs, cache, None, opening)
    assert (anchor - plain).abs().max() < 1e-4
    for j in range(variants.shape[0]):
        _, alone = _run(engine, canvas, positions, pad, bs, cache, variants[j:j + 1], opening)
        assert (packed[j] - alone[0]).abs().max() < 1e-4
        assert (packed[j] - anchor).abs().max() > 1e-3  # a variant really changes the block


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_variant_equal_to_anchor_reproduces_anchor(engine, cache):
    """Visibility rule: a variant sees what the anchor block sees, with its own copy."""
    canvas, positions, pad, bs = _state(engine)
    opening = canvas.clone()
    opening[0, bs:bs + L] = engine.mask_id
    same = canvas[0, bs:bs + L][None].repeat(2, 1)
    anchor, packed = _run(engine, canvas, positions, pad, bs, cache, same, opening)
    for j in range(2):
        assert (packed[j] - anchor).abs().max() < 1e-4


def test_variant_with_cache_none_matches_explicit_mask(engine):
    """cache=none: variant logits equal a forward over [canvas ; variant] with the rule's mask."""
    canvas, positions, pad, bs = _state(engine)
    N = canvas.shape[1]
    lo, hi = bs, bs + L
    v = _variants(canvas, bs, engine, m=1)
    _, packed = _run(engine, canvas, positions, pad, bs, "none", v)
    seq = torch.cat((canvas, v), 1)
    pos = torch.cat((positions, positions[:, lo:hi]), 1)
    mask = torch.zeros(N + L, N + L, dtype=torch.bool)
    mask[:N, :N] = True
    mask[N:, :N] = True
    mask[N:, lo:hi] = False
    mask[N:, N:] = True
    out = engine.model(seq, pos, attn_mask=mask[None, None]).logits[0, N:N + L - engine.shift]
    assert (out - packed[0]).abs().max() < 1e-4
