"""`make bench`: what the engine and the grid path cost on this machine. Measurements, not tests.

  python -m ripple.platform.bench                      forward timings of a random-weight LLaDA-family
                                                       model (medians of repeated runs; the packed lookahead
                                                       against a plain forward per cache policy), the grid
                                                       path's overhead (the demo grid through Ray local mode
                                                       against one process), and throughput mode: the demo
                                                       grid's samples per second at batch 1, 4 and 8
  python -m ripple.platform.bench --preset llada-8b --device cuda --dtype bfloat16
                                                       forwards, lookaheads (k 2, 4, 10) and decode TPS at
                                                       batch 1 and 8 of a random-weight model with
                                                       LLaDA-8B-Instruct's shapes (`--preset tiny` on CPU)
  python -m ripple.platform.bench --batch-equivalence  every demo-grid sample at batch 8 against batch 1,
                                                       cache none, prefix and dual (tokens and NFE)
"""
from __future__ import annotations

import argparse
import json
import os
import platform as pyplatform
import sys
import time

import torch

from ..errors import RippleError
from .runtime.bench_models import PRESETS, get_preset, random_engine
from .runtime.bench_preset import median_ms


def machine() -> str:
    cpu = pyplatform.processor() or pyplatform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((l.split(":", 1)[1].strip() for l in fh if l.startswith("model name")), cpu)
    except OSError:
        pass
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), {dev}"


def run(reps: int = 15, device: str = "cpu", dtype: str = "float32", variants: int = 10) -> dict:
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


def grid_overhead(limit: int = 5) -> dict:
    """The demo grid (`limit` samples per cell) decoded three ways: in this process by one
    `SampleWorker` with every core, through Ray local mode with one worker owning every core
    (same resources: the platform's own overhead), and with the default pool (one worker per core)."""
    import tempfile
    from dataclasses import replace

    from .experiments.demo import demo_spec
    from .experiments.grid import plan, run_grid
    from .experiments.workers import SampleWorker

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


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise RippleError(f"--batch-sizes takes comma-separated positive integers such as 1,4,8, got {text!r}")
    return sizes


def _names(text: str | None, accepted, what: str) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [n for n in names if n not in accepted]
    if unknown or not names:
        raise RippleError(f"unknown {what} {unknown[0] if unknown else text!r}; accepted: {', '.join(accepted)}")
    return names


class _Args(argparse.ArgumentParser):
    """Bad input is one line and exit status 2, as for the `ripple` command."""

    def error(self, message: str):  # noqa: D401
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    p = _Args(prog="python -m ripple.platform.bench", description=__doc__,
              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--reps", type=int, default=None, help="timed runs per forward (default 15; 10 with --preset)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--grid-limit", type=int, default=5, help="samples per cell of the demo grid overhead run")
    p.add_argument("--no-grid", action="store_true", help="skip the grid overhead comparison")
    p.add_argument("--batch-limit", type=int, default=16, help="samples per cell of the batch-size comparison")
    p.add_argument("--batch-sizes", default="1,4,8", help="batch sizes compared, the first is the reference")
    p.add_argument("--no-batches", action="store_true", help="skip the batch-size comparison")
    p.add_argument("--preset", default=None, help=f"a random-weight model report instead: {', '.join(PRESETS)}")
    p.add_argument("--budget-seconds", type=float, default=300.0, help="--preset: wall-time budget of the run")
    p.add_argument("--batch-equivalence", action="store_true", help="compare every demo-grid sample at "
                   "--batch-size against batch 1 instead")
    p.add_argument("--batch-size", type=int, default=8, help="--batch-equivalence: the batch size checked")
    p.add_argument("--caches", default="none,prefix,dual", help="--batch-equivalence: cache policies")
    p.add_argument("--limit", type=int, default=50, help="--batch-equivalence: samples per cell")
    p.add_argument("--decoders", default=None, help="--batch-equivalence: only these decoders (comma-separated)")
    p.add_argument("--tasks", default=None, help="--batch-equivalence: only these tasks (comma-separated)")
    p.add_argument("--model", default="ripple-tiny", help="--batch-equivalence and the batch-size comparison")
    p.add_argument("--write-checkpoint", metavar="DIR", default=None,
                   help="write a random-weight checkpoint of --preset's shapes (llada2-mini) to DIR, then stop")
    p.add_argument("--layers", type=int, default=None, help="--write-checkpoint: only the first N layers")
    p.add_argument("--load-memory", metavar="DIR", default=None,
                   help="peak resident memory of `ripple generate --dtype bfloat16` on the checkpoint DIR, "
                        "against its weight bytes")
    p.add_argument("--no-moe", action="store_true", help="skip the MoE layer comparison (LLaDA2.0-mini shape)")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return _main(args)
    except RippleError as exc:
        print(f"ripple bench: error: {exc}", file=sys.stderr)
        return 2


def _main(args) -> int:
    from ..decoders import CACHE_POLICIES, names
    from .experiments.spec import check_batch_size

    if args.reps is not None and args.reps < 1:
        raise RippleError(f"--reps must be positive, got {args.reps}")
    if args.batch_equivalence:
        from ..tasks import task_names
        from .experiments.equivalence import check

        check_batch_size(args.batch_size, "--batch-size")
        if args.limit < 1:
            raise RippleError(f"--limit must be a positive number of samples per cell, got {args.limit}")
        report = check(args.model, _names(args.caches, CACHE_POLICIES, "cache policy"), args.batch_size, args.limit,
                       _names(args.decoders, names(), "decoder"), _names(args.tasks, task_names(), "task"),
                       progress=not args.json)
        print(json.dumps(report.to_dict()) if args.json else report.format())
        return 1 if report.unexplained else 0
    if args.write_checkpoint is not None:
        from .runtime.bench_models import write_random_checkpoint

        preset = get_preset(args.preset or "llada2-mini")
        n = write_random_checkpoint(preset.config, args.write_checkpoint, layers=args.layers,
                                    dtype=getattr(torch, args.dtype if args.dtype != "float32" else "bfloat16"))
        print(f"wrote {n / 2**30:.2f} GiB of random {preset.name} weights to {args.write_checkpoint}")
        return 0
    if args.load_memory is not None:
        from .runtime.bench_memory import load_memory

        print(json.dumps(load_memory(args.load_memory)) if args.json else load_memory(args.load_memory)["text"])
        return 0
    if args.preset is not None:
        from .runtime.bench_preset import run_preset

        preset = get_preset(args.preset)
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise RippleError(f"--device {args.device}: no CUDA device here; use --device cpu (e.g. --preset tiny)")
        report = run_preset(preset, args.device, args.dtype, reps=args.reps or 10, budget_s=args.budget_seconds,
                            log=(lambda s: None) if args.json else (lambda s: print(s, file=sys.stderr)))
        print(json.dumps(report.to_dict()) if args.json else report.format())
        return 0
    sizes = _sizes(args.batch_sizes)
    if args.batch_limit < 1:
        raise RippleError(f"--batch-limit must be positive, got {args.batch_limit}")
    r = run(reps=args.reps or 15, device=args.device, dtype=args.dtype)
    moe = None
    if not args.no_moe:
        from .runtime.bench_moe import moe_layer

        moe = moe_layer(torch.device(args.device), reps=min(args.reps or 5, 5))
    g = None if args.no_grid else grid_overhead(args.grid_limit)
    b = None
    if not args.no_batches:
        from .experiments.bench_batches import run_batch_bench

        b = run_batch_bench(args.batch_limit, sizes, args.model, progress=not args.json)
    if args.json:
        print(json.dumps({**r, "moe": moe, "grid": g, "batches": b.to_dict() if b else None}))
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
    if moe is not None:
        from .runtime.bench_moe import format_moe

        print(format_moe(moe))
    if g is not None:
        print_grid_overhead(g)
    if b is not None:
        print(b.format())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
