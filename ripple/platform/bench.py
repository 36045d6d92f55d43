"""`make bench`: forward-pass timings of the engine on a random-weight LLaDA-family model.

Reports medians of repeated runs in one process: the forward at canvas length 256 under
each cache policy, and the packed lookahead (m variants of a 32-token block) relative to
a normal forward of the same policy. A measurement, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import platform as pyplatform
import statistics
import time

import torch

from .engine import Engine, _sync
from .models import DiffusionTransformer, TransformerConfig


def machine() -> str:
    cpu = pyplatform.processor() or pyplatform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((l.split(":", 1)[1].strip() for l in fh if l.startswith("model name")), cpu)
    except OSError:
        pass
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), {dev}"


def _median_ms(fn, device, reps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        _sync(device)
        t = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def run(seq: int = 256, block: int = 32, variants: int = 10, d_model: int = 512, layers: int = 8,
        vocab: int = 32768, reps: int = 15, device: str = "cpu", dtype: str = "float32") -> dict:
    torch.manual_seed(0)
    dev = torch.device(device)
    cfg = TransformerConfig(vocab_size=vocab, d_model=d_model, n_layers=layers, n_heads=d_model // 64,
                            n_kv_heads=d_model // 64, mlp_hidden=int(8 * d_model / 3) // 64 * 64,
                            rope_theta=500000.0, norm_eps=1e-5)
    model = DiffusionTransformer(cfg).to(dev, getattr(torch, dtype)).eval()
    mask_id = vocab - 1
    engine = Engine(model, mask_id=mask_id, eos_ids=[1], pad_id=0, device=dev)
    prompt = seq - 2 * block  # the first of two response blocks is being decoded
    canvas = torch.randint(0, vocab - 2, (1, seq), device=dev)
    canvas[0, prompt:] = mask_id
    canvas[0, prompt:prompt + block // 2] = torch.randint(0, vocab - 2, (block // 2,), device=dev)
    positions = torch.arange(seq, device=dev)[None]
    pad = torch.zeros(1, seq, dtype=torch.bool, device=dev)
    lo, hi = prompt, prompt + block
    rows = torch.arange(lo, hi, device=dev)
    results: dict = {"machine": machine(), "config": {"d_model": d_model, "layers": layers, "vocab": vocab,
                     "seq": seq, "block": block, "variants": variants, "dtype": dtype, "reps": reps}}
    with torch.inference_mode():
        _, kv = engine.forward_full(canvas, positions, pad, rows, True)
        results["block_opening_ms"] = _median_ms(
            lambda: engine.forward_full(canvas, positions, pad, rows, True), dev, reps)
        var = canvas[:, lo:hi][:, None].repeat(1, variants, 1)  # [1, m, L]
        var[0, :, block // 2] = torch.arange(variants, device=dev)
        for cache, (w0, w1) in {"none": (0, seq), "prefix": (lo, seq), "dual": (lo, hi)}.items():
            cache_kv = None if cache == "none" else kv
            base_rows = torch.arange(lo - w0, lo - w0 + block, device=dev)
            Tw = w1 - w0
            var_rows = (Tw + torch.arange(variants, device=dev)[:, None] * block
                        + torch.arange(block, device=dev)[None]).reshape(-1)
            normal = _median_ms(lambda: engine.forward_window(canvas, positions, pad, cache_kv, w0, w1, lo, hi,
                                                              None, base_rows), dev, reps)
            look = _median_ms(lambda: engine.forward_window(canvas, positions, pad, cache_kv, w0, w1, lo, hi, var,
                                                            torch.cat((base_rows, var_rows))), dev, reps)
            results[cache] = {"tokens": Tw, "forward_ms": normal, "lookahead_ms": look, "lookahead_ratio": look / normal}
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ripple.platform.bench", description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    r = run(reps=args.reps, device=args.device, dtype=args.dtype)
    if args.json:
        print(json.dumps(r))
        return 0
    c = r["config"]
    print(f"machine: {r['machine']}")
    print(f"model: llada family, d_model {c['d_model']}, {c['layers']} layers, vocab {c['vocab']}, random weights, "
          f"{c['dtype']}; canvas {c['seq']} tokens, block {c['block']}, {c['variants']} lookahead variants; "
          f"median of {c['reps']} runs")
    print(f"block-opening forward (full canvas, fills the KV cache): {r['block_opening_ms']:.1f} ms")
    print(f"{'cache':<8}{'tokens fed':>11}{'forward ms':>12}{'lookahead ms':>14}{'lookahead/forward':>19}")
    for cache in ("none", "prefix", "dual"):
        x = r[cache]
        print(f"{cache:<8}{x['tokens']:>11}{x['forward_ms']:>12.1f}{x['lookahead_ms']:>14.1f}{x['lookahead_ratio']:>19.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
