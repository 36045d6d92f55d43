"""`make bench`, engine forwards: the block-opening forward, and per cache policy the plain forward
of a step against the packed lookahead with 10 variants of the block (RPS's k_max), on the `cpu`
preset's random-weight LLaDA-family model (`presets.py`); medians of repeated runs."""
from __future__ import annotations

import torch

from .presets import get_preset, random_engine
from .timing import machine, median_ms


def run_forwards(reps: int = 15, device: str = "cpu", dtype: str = "float32", variants: int = 10) -> dict:
    """Forward timings of the `cpu` preset: canvas 256 = 192 prompt + 64 response tokens, the first
    response block of 32 being decoded."""
    torch.manual_seed(0)
    preset = get_preset("cpu")
    dev = torch.device(device)
    engine = random_engine(preset, dev, getattr(torch, dtype))
    c, block = preset.config, preset.block_length
    mask_id, vocab = engine.mask_id, c["vocab_size"]
    prompt = preset.prompt_tokens
    seq = prompt + preset.gen_length
    canvas = torch.randint(0, vocab - 2, (1, seq), device=dev)
    canvas[0, prompt:] = mask_id
    canvas[0, prompt:prompt + block // 2] = torch.randint(0, vocab - 2, (block // 2,), device=dev)
    positions = torch.arange(seq, device=dev)[None]
    pad = torch.zeros(1, seq, dtype=torch.bool, device=dev)
    lo, hi = prompt, prompt + block
    rows = torch.arange(lo, hi, device=dev)
    results: dict = {"machine": machine(), "config": {"d_model": c["d_model"], "layers": c["n_layers"], "vocab": vocab,
                     "seq": seq, "block": block, "variants": variants, "dtype": dtype, "reps": reps}}
    with torch.inference_mode():
        _, kv = engine.forward_full(canvas, positions, pad, rows, True)
        results["block_opening_ms"] = median_ms(
            lambda: engine.forward_full(canvas, positions, pad, rows, True), dev, reps, warmup=3)
        var = canvas[:, lo:hi][:, None].repeat(1, variants, 1)  # [1, m, L]
        var[0, :, block // 2] = torch.arange(variants, device=dev)
        for cache, (w0, w1) in {"none": (0, seq), "prefix": (lo, seq), "dual": (lo, hi)}.items():
            cache_kv = None if cache == "none" else kv
            base_rows = torch.arange(lo - w0, lo - w0 + block, device=dev)
            Tw = w1 - w0
            var_rows = (Tw + torch.arange(variants, device=dev)[:, None] * block
                        + torch.arange(block, device=dev)[None]).reshape(-1)
            normal = median_ms(lambda: engine.forward_window(canvas, positions, pad, cache_kv, w0, w1, lo, hi,
                                                             None, base_rows), dev, reps, warmup=3)
            look = median_ms(lambda: engine.forward_window(canvas, positions, pad, cache_kv, w0, w1, lo, hi, var,
                                                           torch.cat((base_rows, var_rows))), dev, reps, warmup=3)
            results[cache] = {"tokens": Tw, "forward_ms": normal, "lookahead_ms": look, "lookahead_ratio": look / normal}
    return results


def format_forwards(r: dict) -> str:
    c = r["config"]
    lines = [f"machine: {r['machine']}",
             f"model: llada family, d_model {c['d_model']}, {c['layers']} layers, vocab {c['vocab']}, random weights, "
             f"{c['dtype']}; canvas {c['seq']} tokens, block {c['block']}, {c['variants']} lookahead variants; "
             f"median of {c['reps']} runs",
             f"block-opening forward (full canvas, fills the KV cache): {r['block_opening_ms']:.1f} ms",
             f"{'cache':<8}{'tokens fed':>11}{'forward ms':>12}{'lookahead ms':>14}{'lookahead/forward':>19}"]
    for cache in ("none", "prefix", "dual"):
        x = r[cache]
        lines.append(f"{cache:<8}{x['tokens']:>11}{x['forward_ms']:>12.1f}{x['lookahead_ms']:>14.1f}"
                     f"{x['lookahead_ratio']:>19.2f}")
    return "\n".join(lines)
