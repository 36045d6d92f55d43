"""train-tiny --family llada2: block-diffusion training of a llada2_moe model (ripple-tiny-bd's recipe):
the batch layout and mask match the engine's, the loss covers exactly the current block's masked and
perturbed positions, the MoE router is balanced by its expert bias, and the export loads as LLaDA2."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from ripple.platform.runtime.engine import Engine
from ripple.platform.runtime.loading import load_model
from ripple.platform.training.block_diffusion import BlockBatcher, block_loss, expert_shares
from ripple.platform.runtime.visibility import forward_mask
from ripple.platform.training.train import PRESETS, Batcher, build_model, train

from tests.clitools import run_cli


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    out = tmp_path_factory.mktemp("bd") / "m"
    summary = train(PRESETS["micro-bd"](str(out), steps=30), progress=False)
    return out, summary


def _batcher(out, batch_size=16, edit_share=0.25):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out / "training" / "tokenizer"))
    cfg = PRESETS["tiny-bd"](str(out), batch_size=batch_size, edit_share=edit_share)
    ids = {"mask_id": tok.mask_token_id, "eos_id": tok.eos_token_id, "pad_id": tok.pad_token_id}
    base = Batcher(cfg, tok, **ids)
    return BlockBatcher(base.pair, cfg, vocab=len(tok), special_ids=tok.all_special_ids, **ids), base, tok, cfg


def test_micro_run_trains_and_exports_a_llada2_checkpoint_the_loader_reads(micro):
    out, summary = micro
    curve = json.loads((out / "training" / "curve.json").read_text())
    assert sum(c["loss"] for c in curve[-3:]) < 0.8 * sum(c["loss"] for c in curve[:3]), curve
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "llada2_moe" and cfg["first_k_dense_replace"] == 1 and cfg["num_shared_experts"] == 1
    keys = load_file(out / "model.safetensors")
    assert {"model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.gate.expert_bias",
            "model.layers.1.mlp.experts.3.down_proj.weight", "model.layers.1.attention.query_key_value.weight",
            "model.layers.1.mlp.shared_experts.up_proj.weight", "lm_head.weight"} <= set(keys)
    assert keys["model.layers.1.mlp.gate.expert_bias"].abs().sum() > 0  # balancing moved it
    lm = load_model(str(out), "float32", "cpu")  # the loader LLaDA2.x goes through
    assert lm.model.block_causal and lm.model.stops_at_eos and lm.model.cfg.moe.n_experts == 4
    assert lm.mask_id == lm.tokenizer.mask_token_id
    # the exported weights are the trained ones: the same logits as the training module
    state = torch.load(out / "training" / "state.pt", weights_only=False)["model"]
    model = build_model(PRESETS["micro-bd"](str(out)), lm.model.vocab_size)
    model.load_state_dict(state)
    model.eval()
    x = torch.randint(4, 400, (2, 32))
    pos = torch.arange(32)[None].expand(2, 32)
    assert torch.equal(model(x, pos).logits, lm.model(x, pos).logits)


def test_the_training_mask_is_the_engines_block_causal_mask(micro):
    out, _ = micro
    bb, _, _, cfg = _batcher(out)
    tokens, positions, attn, pad, *_ = bb.batch(3, torch.Generator().manual_seed(0))
    B, T = tokens.shape
    L = cfg.block_length
    # by definition: query i sees key j iff j is no pad and j's block (by position) <= i's; pad rows see all
    kb = positions // L
    want = ((~pad)[:, None, :] & (kb[:, None, :] <= kb[:, :, None])) | pad[:, :, None]
    assert torch.equal(attn[:, 0], want)
    lm = load_model(str(out), "float32", "cpu")
    engine = Engine(lm.model, mask_id=lm.mask_id, eos_ids=lm.eos_ids, pad_id=lm.pad_id)
    assert torch.equal(attn, forward_mask(pad, positions, 0, T, T - L, T, 0, block=L, shift=engine.shift))  # the engine's forward mask
    assert (T % L == 0) and bool((pad.sum(1) % L == 0).all())  # whole blocks of padding: every row ends at T


def test_the_loss_covers_only_the_current_blocks_masked_and_perturbed_positions(micro):
    out, _ = micro
    bb, base, tok, cfg = _batcher(out, batch_size=32)
    L = cfg.block_length
    tokens, positions, attn, pad, target, masked, perturbed, p_mask, resp = bb.batch(5, torch.Generator().manual_seed(1))
    assert masked.any() and perturbed.any()
    assert not bool((masked & perturbed).any()) and not bool(((masked | perturbed) & ~resp).any())
    block = tokens[:, -L:]
    assert bool((block[masked] == tok.mask_token_id).all())
    changed = perturbed & (block != target)  # selected and replaced; the rest of `perturbed` kept its token
    kept = perturbed & (block == target)
    assert changed.any() and kept.any()  # edit_keep 0.5: both kinds occur
    assert 0.3 < kept.sum() / perturbed.sum() < 0.7
    assert not bool(torch.isin(block[changed], torch.tensor(tok.all_special_ids)).any())  # replacements are ordinary
    untouched = ~masked & ~perturbed
    assert torch.equal(block[untouched], target[untouched])
    # earlier blocks and the prompt are clean: each row is its example's text up to the current block
    for b in range(tokens.shape[0]):
        prompt, response = base.pair(5 * 32 + b)
        clean = (prompt + response + [tok.eos_token_id] * 64)[: int((~pad[b]).sum())]
        assert tokens[b][~pad[b]][:-L].tolist() == clean[:-L]
        assert target[b].tolist() == clean[-L:]
    logits = torch.randn(tokens.shape[0], L, 512, requires_grad=True)
    block_loss(logits, target, masked, perturbed, p_mask, resp).backward()
    touched = logits.grad.abs().sum(-1) > 0  # [B, L]
    assert torch.equal(touched, masked | perturbed)


@pytest.mark.slow
def test_expert_bias_balances_the_router(tmp_path, micro):
    """Balancing (the expert bias) evens the experts' token loads against the same run without it
    (8 experts in 4 groups, 2 groups kept: without it the router collapses onto few experts; after 60
    steps max/mean load is 2.2 with it and 3.8 without)."""
    def spread(rate):
        out = tmp_path / f"r{rate}"
        # the micro run's tokenizer (same vocabulary, seed and tasks): building it would cost more than the steps
        shutil.copytree(micro[0] / "training" / "tokenizer", out / "training" / "tokenizer")
        train(PRESETS["micro-bd"](str(out), steps=60, bias_rate=rate, experts=8, expert_groups=4, topk_groups=2),
              progress=False)
        lm = load_model(str(out), "float32", "cpu")
        bb, *_ = _batcher(out, batch_size=64)
        shares = torch.tensor(expert_shares(lm.model, bb, batches=1, seed=0)[1])  # layer 1, the first MoE layer
        assert abs(float(shares.sum()) - 1) < 1e-6
        return float(shares.max() / shares.mean())

    assert spread(0.01) < 0.8 * spread(0.0)  # max load / mean load


def test_family_and_preset_flags(tmp_path):
    run = lambda *a: run_cli(["train-tiny", "--out", str(tmp_path), *a])  # noqa: E731
    proc = run("--family", "gpt")
    assert proc.returncode == 2 and "unknown family 'gpt'; accepted: llada, llada2" in proc.stderr
    proc = run("--family", "llada2", "--preset", "micro")
    assert proc.returncode == 2 and "preset 'micro' is not of family 'llada2'; accepted: tiny-bd, micro-bd" in proc.stderr
    assert not any(tmp_path.iterdir())
