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
