"""`make bench`, Ray overhead: what the grid path (Ray actors, the result store) costs over
decoding the same demo-grid samples in one plain process."""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace

from ..platform.experiments.demo import demo_spec
from ..platform.experiments.grid import plan, run_grid
from ..platform.experiments.workers import SampleWorker


def grid_overhead(limit: int = 5) -> dict:
    """The demo grid (`limit` samples per cell) decoded three ways: in this process by one
    `SampleWorker` with every core, through Ray local mode with one worker owning every core
    (same resources: the platform's own overhead), and with the default pool (one worker per core)."""
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
