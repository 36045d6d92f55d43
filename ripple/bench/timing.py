"""The clock every benchmark reads: medians of repeated runs, the device synchronised before
each read (a CUDA kernel returns before it finishes), and one line naming the machine."""
from __future__ import annotations

import os
import platform as pyplatform
import statistics
import time
from typing import Callable

import torch

from ..platform.runtime.engine import synchronize


def median_ms(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 2) -> float:
    """Median wall time of `fn` in ms, the device synchronised before each clock read."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        synchronize(device)
        t = time.perf_counter()
        fn()
        synchronize(device)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def machine() -> str:
    cpu = pyplatform.processor() or pyplatform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((l.split(":", 1)[1].strip() for l in fh if l.startswith("model name")), cpu)
    except OSError:
        pass
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), {dev}"
