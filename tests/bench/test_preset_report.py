"""`python -m ripple.bench --preset`: the GPU-readiness report runs end to end on the tiny preset
(CPU), measures what the issue lists, and keeps to its time budget. Timings are not asserted."""
import json

import pytest

from ripple.bench.cli import main
from ripple.bench.presets import get_preset
from ripple.bench.preset_report import run_preset


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


def test_moe_preset_report_runs_block_causal_forwards_and_decodes():
    r = run_preset(get_preset("tiny-moe"), "cpu", "float32", reps=1, ks=(2,), batches=(1,), decoders=("confidence",))
    assert [f.tokens_fed for f in r.forwards] == [32 + 32, 32, 32]  # the extent ends at the block: dual = prefix
    assert all(d.tps and d.tps > 0 for d in r.decodes)
    assert "preset tiny-moe: llada2_moe family, d_model 64, 2 layers" in r.format()


def test_the_llada21_mini_preset_decodes_with_and_without_token_editing():
    """llada2.1-mini: LLaDA2.0-mini's shapes; its report decodes LLaDA2.1's Quality mode and RPS with
    editing beside the decoders without it (run here on tiny-moe's shapes with that preset's decoders)."""
    from dataclasses import replace

    full = get_preset("llada2.1-mini")
    assert full.config == get_preset("llada2-mini").config
    labels = [d[0] for d in full.decoders]
    assert labels == ["default", "confidence", "confidence-quality", "rps", "rps-edit"]
    small = replace(get_preset("tiny-moe"), decoders=full.decoders)
    r = run_preset(small, "cpu", "float32", reps=1, ks=(2,), batches=(1,), caches=("prefix",))
    assert [d.decoder for d in r.decodes] == labels and all(d.nfe and not d.skipped for d in r.decodes)


def test_the_diffusion_gemma_preset_reports_passes_and_peak_memory(capsys, monkeypatch):
    """The uniform-noise preset times the model's own passes and reports the peak against the weights
    (here on the preset's config shrunk to tiny widths, through the same command)."""
    from dataclasses import replace

    from ripple.bench import presets

    full = get_preset("diffusion-gemma-26b")
    text = {**full.config["text_config"], "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
            "num_key_value_heads": 2, "global_head_dim": 32, "num_global_key_value_heads": 1, "sliding_window": 8,
            "num_experts": 8, "top_k_experts": 2, "moe_intermediate_size": 32, "intermediate_size": 96,
            "vocab_size": 512}
    small = replace(full, config={**full.config, "canvas_length": 16, "text_config": text}, prompt_tokens=12,
                    block_length=16)
    monkeypatch.setitem(presets.PRESETS, "diffusion-gemma-26b", small)
    assert main(["--preset", "diffusion-gemma-26b", "--device", "cpu", "--reps", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert [(p["name"], p["tokens"]) for p in r["passes"]] == [
        ("encoder: prompt, new cache", 12), ("decoder: canvas", 16), ("decoder: canvas, self-conditioning", 16),
        ("encoder: canvas appended to cache", 16)]
    assert all(p["ms"] > 0 and p["runs"] == 1 for p in r["passes"])
    assert r["peak_bytes"] >= r["before_bytes"] > 0 and r["weight_bytes"] == 4 * r["parameters"] + 4 * 4  # + scalars
    assert r["full_layers"] == 30 and 25.0e9 * 4 < r["full_weight_bytes"] < 25.5e9 * 4
