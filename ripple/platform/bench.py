"""`make bench`: forward-pass timings of the engine on a random-weight LLaDA-family model.

Reports medians of repeated runs in one process: the forward at canvas length 256 under
each cache policy, and the packed lookahead (m variants of a 32-token block) relative to
a normal forward of the same policy. Then the grid platform's overhead: the demo grid
through Ray local mode against the same samples decoded in one process. A measurement,
not a test.
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


def grid_overhead(limit: int = 5) -> dict:
    """The demo grid (`limit` samples per cell) decoded three ways: in this process by one
    `SampleWorker` with every core, through Ray local mode with one worker owning every core
    (same resources: the platform's own overhead), and with the default pool (one worker per core)."""
    import tempfile
    from dataclasses import replace

    from .demo import demo_spec
    from .grid import plan, run_grid
    from .workers import SampleWorker

    spec = demo_spec(limit=limit)
    cores = os.cpu_count() or 1
    items = plan(spec)
    t0 = time.perf_counter()
    worker = SampleWorker(spec.cells[0].model, dtype=spec.cells[0].dtype, threads=cores)
    t1 = time.perf_counter()
    records = [worker.run(item) for item in items]
    t2 = time.perf_counter()
    rows = [{"setup": "one process (no Ray)", "workers": 1, "startup_s": t1 - t0, "samples_s": t2 - t1,
             "total_s": t2 - t0, "decode_s": sum(r.decode_seconds or 0.0 for r in records)}]
    shapes = [(f"Ray local, 1 worker x {cores} CPUs", replace(spec.workers, count=1, cpus=cores)),
              (f"Ray local, {cores} workers x 1 CPU", replace(spec.workers, count=None, cpus=1))]
    for label, shape in shapes:
        with tempfile.TemporaryDirectory(prefix="ripple-bench-") as store:
            t0 = time.perf_counter()
            run = run_grid(replace(spec, workers=shape), store, track=False, progress=False)
            total = time.perf_counter() - t0
            frame = run.store.read()
        rows.append({"setup": label, "workers": len(run.workers), "startup_s": run.startup_seconds,
                     "samples_s": run.stream_seconds, "total_s": total, "decode_s": frame["decode_seconds"].sum()})
    for row in rows:
        row["samples_per_s"] = len(items) / row["samples_s"]
        row["ratio"] = row["total_s"] / rows[0]["total_s"]
    same = rows[1]
    return {"samples": len(items), "limit": limit, "cells": len(spec.cells), "rows": rows,
            "overhead_ratio": same["total_s"] / rows[0]["total_s"],
            "steady_overhead_ratio": same["samples_s"] / rows[0]["samples_s"]}


def print_grid_overhead(g: dict) -> None:
    print(f"\ngrid overhead: demo grid, {g['limit']} samples per cell ({g['cells']} cells, {g['samples']} samples), "
          f"ripple-tiny, batch 1")
    print(f"{'setup':<30}{'workers':>8}{'startup s':>11}{'samples s':>11}{'total s':>9}{'samples/s':>11}"
          f"{'decode s':>10}{'vs one process':>16}")
    for r in g["rows"]:
        print(f"{r['setup']:<30}{r['workers']:>8}{r['startup_s']:>11.1f}{r['samples_s']:>11.1f}{r['total_s']:>9.1f}"
              f"{r['samples_per_s']:>11.2f}{r['decode_s']:>10.1f}{r['ratio']:>15.2f}x")
    print(f"overhead ratio, Ray local mode with the same resources / one process: {g['overhead_ratio']:.2f} end to end "
          f"(Ray start and model load included), {g['steady_overhead_ratio']:.2f} after start-up")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ripple.platform.bench", description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--json", action="store_true")
    p.add_argument("--grid-limit", type=int, default=5, help="samples per cell of the demo grid overhead run")
    p.add_argument("--no-grid", action="store_true", help="skip the grid overhead comparison")
    args = p.parse_args(argv)
    r = run(reps=args.reps, device=args.device, dtype=args.dtype)
    g = None if args.no_grid else grid_overhead(args.grid_limit)
    if args.json:
        print(json.dumps({**r, "grid": g}))
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
    if g is not None:
        print_grid_overhead(g)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
