"""SDAR / TraDo (sdar, sdar_moe): logits and `block_diffusion_generate` trajectories of SDAR's own
code on sdar-tiny, the block-diffusion layout (the LLaDA2 tests' checks, run on this family), the
Qwen3-MoE layer against transformers' own sparse block, and bad checkpoints."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from ripple.cli import main
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.platform.runtime.loading import load_model
from tests.platform.runtime.checkpoints import changed_copy, refused_in_one_line
from ripple.platform.runtime.models.moe import per_expert_loop
from tests.platform.runtime import test_llada2 as block_diffusion

CACHES = ["none", "prefix", "dual"]


@pytest.fixture(scope="module")
def sdar(golden):
    return load_model(str(golden / "sdar-tiny"), "float32", "cpu")


def _cases(golden):
    return json.loads((golden / "sdar-tiny" / "trajectories.json").read_text())


def test_family_facts_from_the_checkpoint(sdar):
    cfg = sdar.model.cfg
    assert sdar.model_type == "sdar" and sdar.mask_id == 250 and set(sdar.eos_ids) == {240, 242}
    assert (cfg.head_dim, cfg.n_heads, cfg.n_kv_heads, cfg.d_model) == (32, 4, 2, 64)  # 4 x 32 != 64, as in SDAR-4B
    assert cfg.qk_norm and cfg.rotary_dim == cfg.head_dim and not cfg.fused_qkv and cfg.moe is None
    assert sdar.model.block_causal and sdar.model.stops_at_eos and sdar.shift == 0
    assert not torch.equal(sdar.model.head.weight, sdar.model.embed.weight)  # untied


def test_logits_match_the_reference_full_and_block_causal(sdar, golden):
    exp = load_file(str(golden / "sdar-tiny" / "expected.safetensors"))
    checked = 0
    for i in range(3):
        ids, pos = exp[f"input_ids_{i}"], exp[f"position_ids_{i}"]
        assert torch.equal(pos[0], torch.arange(ids.shape[1]))
        out = sdar.model(ids, pos).logits
        assert (out - exp[f"logits_full_{i}"]).abs().max() < 1e-4
        for B in (4, 8):
            blk = pos[0] // B
            mask = blk[None, :] <= blk[:, None]  # query i sees key j iff j // B <= i // B
            assert torch.equal(mask.float(), exp[f"attn_mask_block{B}_{i}"][0])  # generate.py's 0/1 mask
            out = sdar.model(ids, pos, attn_mask=mask[None, None]).logits
            assert (out - exp[f"logits_block{B}_{i}"]).abs().max() < 1e-4
            checked += 1
    assert checked == 6


def _argv(golden, case, cache, trace):
    """SDAR's remasking strategies as Ripple decoders (README "SDAR and TraDo")."""
    S = case["denoising_steps"]
    decoder = {"low_confidence_dynamic": ["confidence", "--set", f"tau={case['confidence_threshold']}"],
               "low_confidence_static": ["confidence", "--set", "tau=1.0"],
               "sequential": ["sequential"]}[case["remasking_strategy"]]
    return ["generate", "--model", str(golden / "sdar-tiny"), "--input-ids", ",".join(map(str, case["prompt"])),
            "--decoder", *decoder, "--set", f"steps={S}", "--gen-length", str(case["gen_length"]),
            "--block-length", str(case["block_length"]), "--cache", cache, "--dtype", "float32", "--device", "cpu",
            "--json", "--trace", str(trace)]


def test_cases_cover_every_strategy_and_both_stop_settings(golden):
    cases = _cases(golden)
    assert len(cases) == 16
    assert {c["remasking_strategy"] for c in cases} == {"low_confidence_dynamic", "low_confidence_static", "sequential"}
    assert {c["stopping_criteria_idx"] is None for c in cases} == {True, False}
    assert all(c["first_stop_offset"] is not None for c in cases)  # every run reaches a stop id


@pytest.mark.parametrize("cache", CACHES)
def test_reference_trajectories_token_for_token(golden, cache, capsys, tmp_path):
    """Each case through `ripple generate`: the decoded tokens up to the end of the block holding the
    first stop id, every denoising forward's commits, and NFE = the reference's denoising forwards up to
    that block (its prefill and store forwards are not model evaluations Ripple needs)."""
    for case in _cases(golden):
        P, B, G = case["prompt_length"], case["block_length"], case["gen_length"]
        trace = tmp_path / f"{case['case']}-{cache}.jsonl"
        assert main(_argv(golden, case, cache, trace)) == 0
        out = json.loads(capsys.readouterr().out)
        stop_block = (P + case["first_stop_offset"]) // B
        upto = min((stop_block + 1) * B - P, G)  # response positions decoded by then
        assert out["tokens"][:upto] == case["generated"][:upto], (case["case"], cache)
        assert out["generated_tokens"] == case["first_stop_offset"], (case["case"], cache)
        ref = [sorted(map(tuple, e["committed"])) for e in case["steps_log"]
               if e["kind"] == "denoise" and e["block"] <= stop_block]
        events = [json.loads(line) for line in trace.read_text().splitlines()]
        ours = [sorted((P + p, t) for p, t in e["committed"]) for e in events if e["phase"] == "step"]
        assert ours == ref, (case["case"], cache)
        assert out["nfe"] == len(ref), (case["case"], cache)
        if case["stopping_criteria_idx"] is not None:  # the same stop rule: the reference's whole run
            assert case["last_block_decoded"] == stop_block
            assert out["nfe"] == case["nfe_denoise"] == case["nfe"] - case["nfe_prefill"] - case["nfe_store"]


def test_static_mapping_commits_only_the_schedule(golden, capsys, tmp_path):
    """tau = 1.0 never fires (no probability exceeds 1): each step commits exactly its quota."""
    case = next(c for c in _cases(golden) if c["case"] == "p1-static-g32-b8-s7")
    trace = tmp_path / "t.jsonl"
    assert main(_argv(golden, case, "prefix", trace)) == 0
    capsys.readouterr()
    per_step = [len(json.loads(line)["committed"]) for line in trace.read_text().splitlines()]
    assert per_step == case["transfer_schedule"] == [2, 1, 1, 1, 1, 1, 1]


# ---------------------------------------------------------------- the block-diffusion layout
# The LLaDA2 tests of the engine's block-diffusion rules, run on this family's checkpoint.
@pytest.mark.parametrize("cache", CACHES)
def test_packed_lookahead_under_the_block_causal_rule(sdar, cache):
    block_diffusion.test_packed_variants_equal_one_variant_forwards_under_the_block_causal_rule(sdar, cache)


def test_variant_visibility_explicit_mask(sdar):
    block_diffusion.test_variant_sees_earlier_blocks_only_through_the_block_causal_rule(sdar)


def test_prefix_cache_is_exact_for_finished_blocks(sdar):
    block_diffusion.test_prefix_cache_is_exact_for_finished_blocks(sdar)


def test_block_layout_aligned_extent_and_last_block_in_full(sdar):
    block_diffusion.test_block_layout_aligned_extent_and_last_block_in_full(sdar)


def test_dual_behaves_as_prefix_for_every_decoder(sdar):
    block_diffusion.test_dual_behaves_as_prefix_for_every_decoder(sdar)


def test_batch_rows_of_different_block_offsets_equal_single_runs(sdar):
    block_diffusion.test_batch_rows_of_different_block_offsets_equal_single_runs(sdar)


# ---------------------------------------------------------------- sdar_moe (Qwen3-MoE routing)
def _qwen3_moe_block(seed, E=16, k=4, d=64, inter=24, norm=True):
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    torch.manual_seed(seed)
    block = Qwen3MoeSparseMoeBlock(Qwen3MoeConfig(hidden_size=d, moe_intermediate_size=inter, num_experts=E,
                                                  num_experts_per_tok=k, norm_topk_prob=norm))
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.3)
    return block.eval()


def _moe_checkpoint(golden, path, blocks, norm=True):
    """sdar-tiny turned into an sdar_moe checkpoint: each layer's MLP replaced by `blocks[i]`'s weights,
    written under the per-expert key names of Qwen3-MoE checkpoints on disk."""
    path.mkdir()
    cfg = json.loads((golden / "sdar-tiny" / "config.json").read_text())
    E, k = blocks[0].gate.weight.shape[0], blocks[0].gate.top_k
    inter = blocks[0].experts.down_proj.shape[2]
    cfg.update(model_type="sdar_moe", architectures=["SDARMoeForCausalLM"], num_experts=E, num_experts_per_tok=k,
               moe_intermediate_size=inter, norm_topk_prob=norm, decoder_sparse_step=1, mlp_only_layers=[])
    (path / "config.json").write_text(json.dumps(cfg))
    shutil.copy(golden / "sdar-tiny" / "generation_config.json", path)
    weights = {key: t for key, t in load_file(str(golden / "sdar-tiny" / "model.safetensors")).items()
               if ".mlp." not in key}
    for i, block in enumerate(blocks):
        pre = f"model.layers.{i}.mlp."
        weights[pre + "gate.weight"] = block.gate.weight.detach().clone()
        for e in range(E):
            gate, up = block.experts.gate_up_proj[e].detach().chunk(2, dim=0)
            weights[pre + f"experts.{e}.gate_proj.weight"] = gate.contiguous()
            weights[pre + f"experts.{e}.up_proj.weight"] = up.contiguous()
            weights[pre + f"experts.{e}.down_proj.weight"] = block.experts.down_proj[e].detach().clone()
    save_file(weights, str(path / "model.safetensors"))
    return path


@pytest.fixture(scope="module")
def sdar_moe(golden, tmp_path_factory):
    blocks = [_qwen3_moe_block(seed) for seed in range(3)]
    path = _moe_checkpoint(golden, tmp_path_factory.mktemp("moe") / "ck", blocks)
    return load_model(str(path), "float32", "cpu"), blocks


@pytest.mark.parametrize("norm", [True, False])
def test_moe_layer_equals_transformers_qwen3_moe_block(golden, tmp_path, norm):
    blocks = [_qwen3_moe_block(seed, norm=norm) for seed in range(3)]
    lm = load_model(str(_moe_checkpoint(golden, tmp_path / "ck", blocks, norm)), "float32", "cpu")
    assert lm.model_type == "sdar_moe" and all(layer.moe is not None for layer in lm.model.layers)
    h = torch.randn(3, 20, 64)
    with torch.no_grad():
        for layer, block in zip(lm.model.layers, blocks):
            want = block(h)
            assert (layer.moe(h) - want).abs().max() < 1e-5
            assert (per_expert_loop(layer.moe, h) - want).abs().max() < 1e-5
            idx, w = layer.moe.route(h.reshape(-1, 64))
            if norm:
                assert torch.allclose(w.sum(-1), torch.ones(60), atol=1e-6)
            else:
                assert bool((w.sum(-1) < 1 - 1e-3).all())  # the top 4 of 16 softmax weights, as they are


def test_moe_forward_makes_no_device_to_host_copy(sdar_moe, monkeypatch):
    lm, _ = sdar_moe
    block_diffusion.test_moe_forward_makes_no_device_to_host_copy(lm, monkeypatch)


def test_sdar_moe_decodes_with_every_cache(sdar_moe):
    lm, _ = sdar_moe
    engine = Engine.from_loaded(lm)
    from ripple.decoders import build

    runs = [engine.generate([[12, 40, 77, 3, 90, 15]], build("confidence", {"tau": "0.5", "steps": "4"}),
                            GenerationConfig(16, 4, cache))[0] for cache in CACHES]
    assert 250 not in runs[0].tokens and runs[0].nfe >= 1
    assert {(r.tokens, r.nfe) for r in runs} == {(runs[0].tokens, runs[0].nfe)}


# ---------------------------------------------------------------- bad checkpoints
def _copy(golden, tmp_path, **changes):
    return changed_copy(golden / "sdar-tiny", tmp_path / "ck", changes)


@pytest.mark.parametrize("changes,message", [
    ({"mask_token_id": None}, "no mask_token_id in config.json nor a mask token in the tokenizer"),
    ({"num_key_value_heads": 3}, "num_attention_heads 4 is not divisible by num_key_value_heads 3"),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0}}, "SDAR rope_scaling {'type': 'yarn', 'factor': 4.0} is not supported"),
    ({"use_sliding_window": True}, "SDAR use_sliding_window true is not supported; supported: false"),
    ({"head_dim": 31}, "head_dim 31 cannot carry rotary embeddings"),
    ({"hidden_size": None}, "config.json lacks 'hidden_size', needed to build the sdar model"),
    ({"head_dim": 16}, "tensor 'model.layers.0.self_attn.k_norm.weight' has shape (32,), config.json implies (16,)"),
    ({"model_type": "sdar_moe"}, "config.json lacks 'num_experts', needed to build the sdar_moe model"),
    ({"model_type": "sdar_moe", "num_experts": 4, "num_experts_per_tok": 6, "moe_intermediate_size": 8},
     "num_experts_per_tok 6 exceeds num_experts 4"),
    ({"model_type": "sdar_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
      "decoder_sparse_step": 2}, "sdar_moe decoder_sparse_step 2 / mlp_only_layers None are not supported"),
])
def test_bad_sdar_configs_are_one_line_and_exit_2(golden, tmp_path, capsys, changes, message):
    refused_in_one_line(capsys, _copy(golden, tmp_path, **changes), message, decoder="sequential", block_length=4)


def test_mask_id_from_the_tokenizer_when_config_names_none(golden, tmp_path):
    from tokenizers import Tokenizer, models

    d = _copy(golden, tmp_path, mask_token_id=None)
    vocab = {f"t{i}": i for i in range(256)}
    vocab["<|MASK|>"] = vocab.pop("t250")
    vocab["<|im_end|>"] = vocab.pop("t242")
    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<|MASK|>", "eos_token": "t240",
                                                         "tokenizer_class": "PreTrainedTokenizerFast"}))
    lm = load_model(str(d), "float32", "cpu")
    assert lm.mask_id == 250 and {240, 242} <= set(lm.eos_ids)


def test_shipped_sdar_grid_validates_with_a_dry_run(capsys):

    assert main(["grid", "sdar", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "experiment sdar, 32 cells" in out and "models: JetAstra/SDAR-8B-Chat" in out
    for name in ["default", "confidence", "sequential", "klass", "eb_sampler", "wino", "lopa", "rps"]:
        assert name in out
    assert "gen_lengths: 256" in out and "block_lengths: 4" in out
