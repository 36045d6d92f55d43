"""`make demo`: every registered decoder on the embedded model's two tasks, one table."""
from __future__ import annotations

import sys

from ..decoders import build, names
from .engine import GenerationConfig
from .evaluate import evaluate_cell
from .loading import load_model

DEMO_TASKS = ("arith", "pyfunc")
GEN_LENGTH, BLOCK_LENGTH = 48, 16


def run_demo(model: str = "ripple-tiny", limit: int = 50, cache: str = "none") -> int:
    from ..tasks import get_task

    lm = load_model(model, dtype="float32", device="auto")
    config = GenerationConfig(GEN_LENGTH, BLOCK_LENGTH, cache)
    rows = []
    for task_name in DEMO_TASKS:
        task = get_task(task_name)
        base_tps = None
        for name in names():
            cell = evaluate_cell(lm, task, build(name), config, limit=limit)
            if name == "default":
                base_tps = cell.tps
            speedup = cell.tps / base_tps if base_tps else float("nan")
            rows.append((task_name, name, cell.accuracy, cell.mean_nfe, cell.tps, speedup))
            print(f"  {task_name:<7} {name:<11} done", file=sys.stderr)
    print(f"ripple-tiny demo: {limit} test examples per task, gen_length {GEN_LENGTH}, block_length {BLOCK_LENGTH}, "
          f"cache {cache}, default hyperparameters, device {lm.device}")
    print(f"| {'task':<7} | {'decoder':<11} | {'accuracy %':>10} | {'mean NFE':>8} | {'TPS':>8} | {'speedup':>7} |")
    print(f"|{'-' * 9}|{'-' * 13}|{'-' * 12}|{'-' * 10}|{'-' * 10}|{'-' * 9}|")
    for task_name, name, acc, nfe, tps, sp in rows:
        print(f"| {task_name:<7} | {name:<11} | {acc:>10.1f} | {nfe:>8.2f} | {tps:>8.1f} | {sp:>6.2f}x |")
    return 0
