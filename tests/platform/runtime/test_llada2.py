"""LLaDA2 (llada2_moe): logits and `generate` trajectories of inclusionAI's reference code on
llada2-tiny, the block-diffusion layout, and the MoE layer."""
import json

import pytest
import torch
from safetensors.torch import load_file

from ripple.cli import main
from ripple.decoders import build
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.platform.runtime.loading import load_model
from tests.platform.runtime.checkpoints import changed_copy, refused_in_one_line
from ripple.platform.runtime.models.moe import MoE, MoEConfig, per_expert_loop


@pytest.fixture(scope="module")
def llada2(golden):
    return load_model(str(golden / "llada2-tiny"), "float32", "cpu")


def _cases(golden):
    return json.loads((golden / "llada2-tiny" / "trajectories.json").read_text())


def test_logits_match_the_reference_bidirectional_and_block_causal(llada2, golden):
    exp = load_file(str(golden / "llada2-tiny" / "expected.safetensors"))
    checked = 0
    for i in range(3):
        ids = exp[f"input_ids_{i}"]
        pos = torch.arange(ids.shape[1])[None]
        out = llada2.model(ids, pos).logits
        assert (out - exp[f"logits_nomask_{i}"]).abs().max() < 1e-4
        for B in (8, 16):
            if f"logits_block{B}_{i}" not in exp:
                continue
            blk = pos[0] // B
            mask = (blk[None, :] <= blk[:, None])[None, None]  # query i sees key j iff j // B <= i // B
            assert torch.equal(torch.where(mask, 0.0, float("-inf")), exp[f"attn_mask_block{B}_{i}"])
            out = llada2.model(ids, pos, attn_mask=mask).logits
            assert (out - exp[f"logits_block{B}_{i}"]).abs().max() < 1e-4
            checked += 1
    assert checked == 5


def _argv(golden, case, cache):
    """The reference's generate(steps, threshold, minimal_topk, eos_early_stop) as `ripple generate`."""
    steps = min(case["steps"], case["gen_length"] // case["minimal_topk"])
    argv = ["generate", "--model", str(golden / "llada2-tiny"), "--input-ids", ",".join(map(str, case["prompt"])),
            "--decoder", "confidence", "--set", f"tau={case['threshold']}", "--set", f"steps={steps}",
            "--gen-length", str(case["gen_length"]), "--block-length", str(case["block_length"]),
            "--cache", cache, "--dtype", "float32", "--device", "cpu", "--json"]
    return argv + (["--eos-early-stop"] if case["eos_early_stop"] else [])


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_reference_trajectories_token_for_token(golden, cache, capsys):
    cases = _cases(golden)
    assert len(cases) == 16
    for case in cases:
        assert main(_argv(golden, case, cache)) == 0
        out = json.loads(capsys.readouterr().out)
        cut = case["generated"]  # the reference's output after the prompt: cut after the first EOS, else at G
        assert out["tokens"][:len(cut)] == cut, (case["case"], cache)
        assert out["nfe"] == case["nfe"], (case["case"], cache)
        assert out["generated_tokens"] == (cut.index(151) if 151 in cut else len(cut))


def test_eos_early_stop_saves_forwards_and_keeps_tokens(golden, capsys):
    early = [c for c in _cases(golden) if c["eos_early_stop"]]
    assert early
    for case in early:
        plain = dict(case, eos_early_stop=False)
        assert main(_argv(golden, plain, "prefix")) == 0
        full = json.loads(capsys.readouterr().out)
        assert main(_argv(golden, case, "prefix")) == 0
        short = json.loads(capsys.readouterr().out)
        cut = case["generated"]
        assert short["tokens"][:len(cut)] == full["tokens"][:len(cut)] and short["nfe"] < full["nfe"]


class Recorder:
    """The model, recording what each forward sees (token count, window) for layout checks."""

    def __init__(self, model):
        self.model, self.seen = model, []

    def __getattr__(self, name):  # every family property (shift, block_causal, ...) is the model's
        return getattr(self.model, name)

    def __call__(self, tokens, positions, attn_mask=None, kv=None, window=None, **kw):
        self.seen.append((int(positions.max()) + 1, window, tokens.shape[1]))
        return self.model(tokens, positions, attn_mask=attn_mask, kv=kv, window=window, **kw)


def test_block_layout_aligned_extent_and_last_block_in_full(llada2):
    """Prompt of 13, gen 16, block 8: blocks at positions 8, 16, 24 (the first holds the prompt's tail,
    the last runs to 32, past 13 + 16 = 29); each forward sees positions up to its block's end only."""
    rec = Recorder(llada2.model)
    engine = Engine(rec, mask_id=llada2.mask_id, eos_ids=(), pad_id=llada2.pad_id)
    events = []
    out = engine.generate([list(range(20, 33))], build("default"), GenerationConfig(16, 8, "prefix"),
                          trace=events.append)[0]
    committed = sorted(p for e in events for p, _ in e["committed"])
    assert committed == list(range(0, 19))  # response positions 0..18: 3 in block 1, 8, 8 (16..18 past G)
    assert len(out.tokens) == 16 and out.nfe == 19 == len(rec.seen)
    extents = [ext for ext, _, _ in rec.seen]
    assert extents == [16] * 3 + [24] * 8 + [32] * 8
    windows = [w for _, w, _ in rec.seen]
    # prefix: a block's opening recomputes the previous block (finished now) and itself, the keys of
    # earlier blocks come from the previous opening; its steps recompute the block only
    assert windows == [None, (8, 16), (8, 16), (8, 24)] + [(16, 24)] * 7 + [(16, 32)] + [(24, 32)] * 7


def test_batch_rows_of_different_block_offsets_equal_single_runs(llada2):
    prompts = [list(range(20, 33)), [5, 9, 33], list(range(40, 56)), list(range(60, 81))]  # 13, 3, 16, 21 tokens
    engine = Engine.from_loaded(llada2)
    for name, settings in [("confidence", {"tau": "0.3"}), ("rps", {"tau_pivot": "0.3"}), ("klass", {"tau": "0.2"}),
                           ("wino", {"tau1": "0.2", "tau2": "0.5"})]:
        for cache in ("none", "dual"):
            cfg = GenerationConfig(16, 8, cache)
            batch = engine.generate(prompts, build(name, settings), cfg)
            singles = [engine.generate([p], build(name, settings), cfg)[0] for p in prompts]
            assert [(b.tokens, b.nfe) for b in batch] == [(s.tokens, s.nfe) for s in singles], (name, cache)


def test_prefix_cache_is_exact_for_finished_blocks(llada2):
    """The opening of block b reuses keys of blocks < b - 1 from the previous opening: its block rows
    equal those of a full block-causal forward over the same canvas."""
    engine = Engine.from_loaded(llada2)
    g = torch.Generator().manual_seed(3)
    canvas = torch.randint(0, 150, (1, 40), generator=g)
    canvas[0, 32:] = llada2.mask_id  # block 4 (positions 32..40) just opened, blocks 0-3 finished
    positions, pad = torch.arange(40)[None], torch.zeros(1, 40, dtype=torch.bool)
    earlier = canvas[:, :32].clone()
    earlier[0, 24:32] = llada2.mask_id  # the previous opening saw block 3 still masked
    _, kv = engine.forward_full(earlier, positions[:, :32], pad[:, :32], torch.arange(24, 32), True, block=8)
    full, _ = engine.forward_full(canvas, positions, pad, torch.arange(32, 40), True, block=8)
    part, merged = engine.forward_window(canvas, positions, pad, kv, 24, 40, 32, 40, None, torch.arange(8, 16),
                                         block=8, return_kv=True)
    assert (part - full).abs().max() < 1e-4
    _, fresh = engine.forward_full(canvas, positions, pad, torch.arange(32, 40), True, block=8)
    assert all((a - b).abs().max() < 1e-4 for a, b in zip(merged.keys, fresh.keys))


def test_dual_behaves_as_prefix_for_every_decoder(llada2):
    from ripple.decoders import decoders_for
    from tests.decoders.test_invariants import decoder  # with the data files a decoder reads (a learned filter)

    engine = Engine.from_loaded(llada2)
    for name in decoders_for("mask", "dual"):  # a block-diffusion family takes the mask decoders of block caches
        runs = [engine.generate([[12, 40, 77, 3, 90, 15]], decoder(name, {}, block_length=8),
                                GenerationConfig(24, 8, cache))[0]
                for cache in ("prefix", "dual")]
        assert (runs[0].tokens, runs[0].nfe) == (runs[1].tokens, runs[1].nfe), name


# ---------------------------------------------------------------- packed lookahead, block-causal
L = 8


def _canvas(engine, decoded=3):
    """Prompt of 12, block 2 (positions 16..24) with `decoded` positions filled; extent 24."""
    g = torch.Generator().manual_seed(0)
    canvas = torch.full((1, 24), engine.mask_id)
    canvas[0, :16] = torch.randint(0, 140, (16,), generator=g)
    canvas[0, 16:16 + decoded] = torch.randint(0, 140, (decoded,), generator=g)
    return canvas, torch.arange(24)[None], torch.zeros(1, 24, dtype=torch.bool)


def _block_rows(engine, canvas, positions, pad, cache, variants=None):
    lo, hi = 16, 24
    opening = canvas.clone()
    opening[0, lo:hi] = engine.mask_id
    kv = None
    if cache != "none":
        _, kv = engine.forward_full(opening, positions, pad, torch.arange(lo, hi), True, block=L)
    w0, w1 = (0, 24) if cache == "none" else (lo, hi)
    m = 0 if variants is None else variants.shape[0]
    rows = torch.cat([torch.arange(lo - w0, hi - w0)] + ([(w1 - w0) + torch.arange(m * L)] if m else []))
    out = engine.forward_window(canvas, positions, pad, kv, w0, w1, lo, hi,
                                None if variants is None else variants[None], rows, block=L)[0]
    return out[:L], out[L:].reshape(m, L, -1) if m else None


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_packed_variants_equal_one_variant_forwards_under_the_block_causal_rule(llada2, cache):
    engine = Engine.from_loaded(llada2)
    canvas, positions, pad = _canvas(engine)
    variants = canvas[0, 16:24][None].repeat(3, 1)
    for j, tok in enumerate((7, 99, 131)):
        variants[j, 3 + j] = tok
    anchor, packed = _block_rows(engine, canvas, positions, pad, cache, variants)
    plain, _ = _block_rows(engine, canvas, positions, pad, cache)
    assert (anchor - plain).abs().max() < 1e-4
    for j in range(3):
        _, alone = _block_rows(engine, canvas, positions, pad, cache, variants[j:j + 1])
        assert (packed[j] - alone[0]).abs().max() < 1e-4
        # the same as decoding that variant's block in place: what its block would see
        placed = canvas.clone()
        placed[0, 16:24] = variants[j]
        direct, _ = _block_rows(engine, placed, positions, pad, "none")
        assert (packed[j] - direct).abs().max() < 1e-4
        assert (packed[j] - anchor).abs().max() > 1e-3


def test_variant_sees_earlier_blocks_only_through_the_block_causal_rule(llada2):
    """Explicit mask: the variant copy sees blocks 0-1 and itself; base queries never see it."""
    engine = Engine.from_loaded(llada2)
    canvas, positions, pad = _canvas(engine)
    v = canvas[0, 16:24].clone()
    v[4] = 11
    _, packed = _block_rows(engine, canvas, positions, pad, "none", v[None])
    seq = torch.cat((canvas, v[None]), 1)
    pos = torch.cat((positions, positions[:, 16:24]), 1)
    blk = positions[0] // L
    mask = torch.zeros(32, 32, dtype=torch.bool)
    mask[:24, :24] = blk[None, :] <= blk[:, None]
    mask[24:, :16] = True
    mask[24:, 24:] = True
    out = llada2.model(seq, pos, attn_mask=mask[None, None]).logits[0, 24:]
    assert (out - packed[0]).abs().max() < 1e-4


# ---------------------------------------------------------------- MoE layer
def _moe(seed=0, E=16, k=4, groups=4, keep=2):
    torch.manual_seed(seed)
    moe = MoE(32, MoEConfig(n_experts=E, top_k=k, n_group=groups, topk_group=keep, hidden=24, n_shared=1,
                            routed_scaling=2.5))
    with torch.no_grad():
        for p in moe.parameters():
            p.normal_(0, 0.3)
    return moe.eval()


def test_grouped_moe_equals_the_per_expert_loop_and_the_dense_fallback():
    moe = _moe()
    h = torch.randn(3, 20, 32)
    with torch.no_grad():
        out = moe(h)
        assert (out - per_expert_loop(moe, h)).abs().max() < 1e-5
        idx, w = moe.route(h.reshape(-1, 32))
        y = (moe._every_expert(h.reshape(-1, 32), idx).float() * w[..., None]).sum(1) + moe.shared(h.reshape(-1, 32))
        assert (out.reshape(-1, 32) - y).abs().max() < 1e-5
    # routing: selected on biased scores inside the kept groups, weights sum to routed_scaling
    assert torch.allclose(w.sum(-1), torch.full((60,), 2.5, dtype=torch.float32), atol=1e-5)
    groups = idx // 4  # 16 experts in 4 groups
    assert all(len(set(g.tolist())) <= 2 for g in groups)


def test_moe_forward_makes_no_device_to_host_copy(llada2, monkeypatch):
    """Every host read of a tensor (as the reference's expert loop does per layer) fails the forward."""
    calls = []

    def refuse(name):
        def method(self, *a, **kw):
            calls.append(name)
            raise AssertionError(f"host transfer: Tensor.{name}")
        return method

    ids = torch.randint(0, 150, (2, 24))
    pos = torch.arange(24)[None].expand(2, 24)
    blk = pos[0] // 8
    mask = (blk[None, :] <= blk[:, None])[None, None]
    with torch.no_grad():
        want = llada2.model(ids, pos, attn_mask=mask).logits
        for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"):
            monkeypatch.setattr(torch.Tensor, name, refuse(name))
        got = llada2.model(ids, pos, attn_mask=mask).logits
        moe_out = llada2.model.layers[1].moe(torch.randn(2, 24, 64))
        with pytest.raises(AssertionError, match="host transfer"):
            per_expert_loop(llada2.model.layers[1].moe, torch.randn(2, 24, 64))  # the check can fail
    monkeypatch.undo()
    assert calls == ["tolist"] and torch.equal(got, want) and moe_out.shape == (2, 24, 64)


# ---------------------------------------------------------------- bad checkpoints
def _copy(golden, tmp_path, **changes):
    return changed_copy(golden / "llada2-tiny", tmp_path / "ck", changes)


@pytest.mark.parametrize("changes,message", [
    ({"num_experts": 10}, "num_experts 10 is not divisible by n_group 4"),
    ({"topk_group": 5}, "topk_group 5 exceeds n_group 4"),
    ({"num_experts_per_tok": 5}, "num_experts_per_tok 5 exceeds the 4 experts of the topk_group 2 kept groups"),
    ({"n_group": 8}, "each of the n_group 8 groups needs at least 2 experts"),
    ({"score_function": "softmax"}, "score_function 'softmax' is not supported; supported: sigmoid"),
    ({"partial_rotary_factor": 0.1}, "partial_rotary_factor gives 1 rotary dims of a 16-dim head"),
    ({"mask_token_id": None}, "no mask_token_id in config.json nor a mask token in the tokenizer"),
])
def test_bad_llada2_configs_are_one_line_and_exit_2(golden, tmp_path, capsys, changes, message):
    refused_in_one_line(capsys, _copy(golden, tmp_path, **changes), message)


def test_mask_id_from_the_tokenizer_when_config_names_none(golden, tmp_path):
    from tokenizers import Tokenizer, models

    d = _copy(golden, tmp_path, mask_token_id=None)
    vocab = {f"t{i}": i for i in range(160)}
    vocab["<|mask|>"] = 150
    del vocab["t150"]
    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<|mask|>", "eos_token": "t151",
                                                         "tokenizer_class": "PreTrainedTokenizerFast"}))
    lm = load_model(str(d), "float32", "cpu")
    assert lm.mask_id == 150 and 151 in lm.eos_ids


def test_a_gpu_smaller_than_the_weights_is_refused_before_loading(tmp_path, monkeypatch):
    from ripple.errors import RippleError
    from ripple.platform.runtime.loading import check_device_memory, weight_bytes

    f = tmp_path / "model.safetensors"
    header = json.dumps({"w": {"dtype": "BF16", "shape": [1024, 1024, 1024], "data_offsets": [0, 2 << 30]}}).encode()
    with open(f, "wb") as fh:
        fh.write(len(header).to_bytes(8, "little") + header)
        fh.truncate(8 + len(header) + (2 << 30))  # sparse: 2 GiB of bfloat16 weights on no disk
    assert weight_bytes([f], torch.bfloat16) == 2 << 30 and weight_bytes([f], torch.float32) == 4 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 30, 3 << 30))
    with pytest.raises(RippleError, match=r"needs 2\.0 GiB for its weights in bfloat16, but cuda:0 has 1\.0 GiB free"):
        check_device_memory([f], torch.device("cuda:0"), torch.bfloat16, "big")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (5 << 30, 8 << 30))
    check_device_memory([f], torch.device("cuda:0"), torch.bfloat16, "big")  # fits: no error


def test_shipped_llada2_grid_validates_with_a_dry_run(capsys):
    assert main(["grid", "llada2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "experiment llada2, 28 cells" in out and "models: inclusionAI/LLaDA2.0-mini" in out
    for name in ("default", "confidence(tau=0.95)", "klass", "eb_sampler", "wino", "lopa", "rps"):
        assert name in out
    assert "gen_lengths: 256" in out and "block_lengths: 32" in out
