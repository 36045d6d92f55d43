"""`python -m ripple.platform.bench --preset`: the GPU-readiness report runs end to end on the tiny preset
(CPU), measures what the issue lists, and keeps to its time budget. Timings are not asserted."""
import json

import pytest

from ripple.platform.bench import main
from ripple.platform.runtime.bench_models import LLADA_8B, PRESETS, get_preset
from ripple.platform.runtime.bench_preset import run_preset
from ripple.platform.runtime.models.llada import LLADA


def test_the_llada_8b_preset_has_the_real_models_shapes():
    cfg = LLADA.to_config(PRESETS["llada-8b"].config)
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.mlp_hidden, cfg.vocab_size) == \
        (4096, 32, 32, 32, 12288, 126464)
    assert (cfg.rope_theta, cfg.norm_eps, LLADA_8B["mask_token_id"]) == (500000.0, 1e-5, 126336)
    params = 2 * cfg.vocab_size * cfg.d_model + cfg.n_layers * (4 * cfg.d_model ** 2 + 3 * cfg.d_model * cfg.mlp_hidden)
    assert 8.0e9 < params < 8.1e9  # LLaDA-8B: 8.02 B parameters
    p = PRESETS["llada-8b"]
    assert (p.gen_length, p.block_length) == (256, 32)


@pytest.mark.slow
def test_tiny_preset_reports_forwards_lookaheads_and_decodes(capsys):
    assert main(["--preset", "tiny", "--device", "cpu", "--reps", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["preset"], r["gen_length"], r["block_length"]) == ("tiny", 64, 32)
    assert [f["cache"] for f in r["forwards"]] == ["none", "prefix", "dual"]
    assert [f["tokens_fed"] for f in r["forwards"]] == [16 + 64, 64, 32]  # canvas, block start to end, block
    for f in r["forwards"]:
        assert set(f["forward_ms"]) == {"1", "8"} and set(f["lookahead_ms"]) == set(f["ratio"]) == {"2", "4", "10"}
        assert all(v > 0 for v in [*f["forward_ms"].values(), *f["lookahead_ms"].values()])
    grid = {(d["cache"], d["decoder"], d["batch"]) for d in r["decodes"]}
    assert grid == {(c, d, b) for c in ("none", "prefix", "dual") for d in ("default", "confidence", "rps")
                    for b in (1, 8)}
    assert all(d["skipped"] is None and d["tps"] > 0 for d in r["decodes"])
    # random weights are never confident: every decoder commits one token per step
    assert {d["nfe"] for d in r["decodes"]} == {64.0}


def test_a_decode_that_would_overrun_the_budget_is_reported_as_skipped():
    r = run_preset(get_preset("tiny"), "cpu", "float32", reps=1, ks=(2,), caches=("dual",), decoders=("default",),
                   budget_s=0.0)
    assert [(d.batch, d.tps) for d in r.decodes] == [(1, None), (8, None)]
    assert all(d.skipped.startswith("estimated ") for d in r.decodes)
    assert "skipped: estimated" in r.format()


def test_bad_bench_input_is_one_line_exit_2(capsys):
    for argv, message in ((["--preset", "huge"], "unknown preset 'huge'; accepted: llada-8b, cpu, llada2-mini, tiny-moe, tiny"),
                          (["--batch-equivalence", "--batch-size", "0"], "--batch-size must be a positive number"),
                          (["--batch-equivalence", "--decoders", "rsp"], "unknown decoder 'rsp'"),
                          (["--batch-sizes", "1,x"], "--batch-sizes takes comma-separated positive integers")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_the_llada2_mini_preset_has_the_real_models_shapes():
    from ripple.platform.runtime.models.llada2 import LLADA2

    cfg = LLADA2.to_config(PRESETS["llada2-mini"].config)
    moe = cfg.moe
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rotary_dim, cfg.mlp_hidden,
            cfg.vocab_size, cfg.dense_layers) == (2048, 20, 16, 4, 128, 64, 5120, 157184, 1)
    assert (moe.n_experts, moe.top_k, moe.n_group, moe.topk_group, moe.hidden, moe.n_shared) == (256, 8, 8, 4, 512, 1)
    d, attn = cfg.d_model, (16 + 2 * 4) * 128 * cfg.d_model + 16 * 128 * cfg.d_model
    total = 2 * 157184 * d + 20 * attn + 3 * d * 5120 + 19 * (3 * d * 512 * 257 + 256 * d)
    active = 2 * 157184 * d + 20 * attn + 3 * d * 5120 + 19 * (3 * d * 512 * 9 + 256 * d)
    assert 16.0e9 < total < 16.5e9 and 1.35e9 < active < 1.5e9  # LLaDA2.0-mini: 16 B total, 1.4 B active
    import torch

    with torch.device("meta"):
        model = LLADA2.build(cfg)
    norms = 2 * 20 * d + 20 * 2 * 128 + d + 19 * 256  # RMSNorm weights (two a layer, q/k, final); expert_bias
    assert sum(p.numel() for p in model.parameters()) == total + norms  # the module built from the preset


def test_moe_preset_report_runs_block_causal_forwards_and_decodes():
    r = run_preset(get_preset("tiny-moe"), "cpu", "float32", reps=1, ks=(2,), batches=(1,), decoders=("confidence",))
    assert [f.tokens_fed for f in r.forwards] == [32 + 32, 32, 32]  # the extent ends at the block: dual = prefix
    assert all(d.tps and d.tps > 0 for d in r.decodes)
    assert "preset tiny-moe: llada2_moe family, d_model 64, 2 layers" in r.format()


def test_random_llada2_checkpoint_in_two_shards_loads_and_decodes(tmp_path, capsys):
    from ripple.cli import main as ripple

    assert main(["--preset", "tiny-moe", "--write-checkpoint", str(tmp_path / "ck"), "--dtype", "bfloat16"]) == 0
    assert "wrote" in capsys.readouterr().out
    index = json.loads((tmp_path / "ck" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 2
    argv = ["generate", "--model", str(tmp_path / "ck"), "--input-ids", "5,6,7", "--decoder", "rps",
            "--gen-length", "32", "--block-length", "16", "--dtype", "bfloat16", "--device", "cpu", "--json"]
    assert ripple(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["tokens"]) == 32 and out["nfe"] > 0
