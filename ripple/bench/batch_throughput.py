"""`make bench`, throughput mode: the demo grid's samples per second at batch 1, 4 and 8.

One `SampleWorker` (the class a grid's Ray actor runs, one torch thread as a CPU grid
worker has) decodes and scores every sample of the demo grid once per batch size, in
batches of one cell's consecutive samples as the grid driver cuts them. The batch sizes
are interleaved cell by cell, in an order that rotates from cell to cell, so a change in
the machine's load during the run hits every batch size alike. Two rates per batch size:
decode (samples / the batches' wall time from first forward to last commit) and worker
(samples / the whole `run_batch` calls: prompts, decoding and scoring, one after another).
The tokens of every sample are compared across batch sizes on the way.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

BATCH_SIZES = (1, 4, 8)


@dataclass
class BatchBench:
    batch_sizes: tuple[int, ...]
    cells: int
    limit: int
    samples: int = 0  # per batch size
    decode_s: dict[int, float] = field(default_factory=dict)
    worker_s: dict[int, float] = field(default_factory=dict)
    by_decoder: dict[str, dict[int, float]] = field(default_factory=dict)  # decoder -> batch -> decode seconds
    differing: int = 0  # samples whose completion or NFE differs from batch 1's
    hardware: str = ""

    def rate(self, seconds: dict[int, float], b: int) -> float:
        return self.samples / seconds[b] if seconds[b] > 0 else 0.0

    def to_dict(self) -> dict:
        return {"batch_sizes": list(self.batch_sizes), "cells": self.cells, "limit": self.limit,
                "samples": self.samples, "differing": self.differing, "hardware": self.hardware,
                "decode_s": self.decode_s, "worker_s": self.worker_s, "by_decoder_decode_s": self.by_decoder,
                "decode_samples_per_s": {b: self.rate(self.decode_s, b) for b in self.batch_sizes},
                "worker_samples_per_s": {b: self.rate(self.worker_s, b) for b in self.batch_sizes}}

    def format(self) -> str:
        first = self.batch_sizes[0]
        lines = [f"\nthroughput mode: demo grid, {self.cells} cells x {self.limit} samples ({self.samples} samples per "
                 f"batch size), one worker on {self.hardware}, batch sizes interleaved cell by cell",
                 f"{'batch':>5}{'decode s':>10}{'samples/s':>11}{f'vs batch {first}':>12}{'worker s':>10}"
                 f"{'samples/s':>11}{f'vs batch {first}':>12}"]
        for b in self.batch_sizes:
            lines.append(f"{b:>5}{self.decode_s[b]:>10.1f}{self.rate(self.decode_s, b):>11.2f}"
                         f"{self.decode_s[first] / self.decode_s[b]:>11.2f}x{self.worker_s[b]:>10.1f}"
                         f"{self.rate(self.worker_s, b):>11.2f}{self.worker_s[first] / self.worker_s[b]:>11.2f}x")
        last = self.batch_sizes[-1]
        lines.append(f"decode speed at batch {last} vs {first}, by decoder: " + ", ".join(
            f"{d} {t[first] / t[last]:.2f}x" for d, t in self.by_decoder.items()))
        lines.append(f"samples whose completion or NFE differs from batch {first}: {self.differing}")
        return "\n".join(lines)


def run_batch_bench(limit: int = 16, batch_sizes: tuple[int, ...] = BATCH_SIZES, model: str = "ripple-tiny",
                    threads: int = 1, progress: bool = True) -> BatchBench:
    from ..platform.experiments.demo import demo_spec
    from ..platform.experiments.grid import batches, plan
    from ..platform.experiments.workers import SampleWorker
    from ..progress import progress as progress_bar

    spec = demo_spec(model, limit)
    items = plan(spec)
    by_cell: dict[str, list] = defaultdict(list)
    for it in items:
        by_cell[it.cell.cell_id].append(it)
    worker = SampleWorker(model, dtype=spec.cells[0].dtype, threads=threads)
    bench = BatchBench(tuple(batch_sizes), len(by_cell), limit, samples=len(items), hardware=worker.hardware)
    bench.decode_s = {b: 0.0 for b in batch_sizes}
    bench.worker_s = {b: 0.0 for b in batch_sizes}
    bar = progress_bar(total=len(by_cell), disable=not progress, desc="batch sizes", unit="cell", leave=False)
    for i, cell_items in enumerate(by_cell.values()):
        order = batch_sizes[i % len(batch_sizes):] + batch_sizes[:i % len(batch_sizes)]  # rotates per cell
        outcome: dict[int, dict[str, tuple]] = {}
        decoder = cell_items[0].cell.decoder
        for b in order:
            records = []
            t0 = time.perf_counter()
            for chunk in batches(cell_items, b):
                records += worker.run_batch(chunk, b)
            bench.worker_s[b] += time.perf_counter() - t0
            decode = sum({r.batch_id: r.batch_seconds or 0.0 for r in records}.values())
            bench.decode_s[b] += decode
            bench.by_decoder.setdefault(decoder, defaultdict(float))[b] += decode
            outcome[b] = {r.sample_id: (r.completion, r.nfe, r.error) for r in records}
        ref = outcome[batch_sizes[0]]
        bench.differing += sum(1 for b in batch_sizes[1:] for k, v in outcome[b].items() if ref[k] != v)
        bar.update(1)
    bar.close()
    bench.by_decoder = {d: dict(t) for d, t in bench.by_decoder.items()}
    return bench
