"""Peak host memory of loading and decoding a checkpoint, against its weight bytes.

`ripple generate --dtype bfloat16 --device cpu` runs in a child process; its peak resident set
(the kernel's ru_maxrss of the child) over the bytes its weights take in bfloat16 is the figure:
the streaming loader (ripple/platform/runtime/loading.py) reads each tensor straight into its
parameter, so the ratio is the weights plus the interpreter, torch and the decode's activations.
"""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from ..errors import RippleError
from ..platform.runtime.loading import read_config, weight_bytes, weight_files


def load_memory(path: str, gen_length: int = 32, block_length: int = 32) -> dict:
    ckpt = Path(path)
    read_config(ckpt)  # a folder without a valid config.json is one line before anything runs
    files = weight_files(ckpt)
    weights = weight_bytes(files, torch.bfloat16)
    ids = ",".join(str(i) for i in range(1, 17))  # a 16-token prompt (a mask id among them is refused in one line)
    argv = [sys.executable, "-m", "ripple.cli", "generate", "--model", str(ckpt), "--input-ids", ids,
            "--decoder", "confidence", "--gen-length", str(gen_length), "--block-length", str(block_length),
            "--dtype", "bfloat16", "--device", "cpu", "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RippleError(f"ripple generate on {ckpt} failed: {proc.stderr.strip().splitlines()[-1:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux reports KiB
    ratio = peak / weights
    text = (f"{ckpt}: {len(files)} shard(s), weights {weights / 2**30:.2f} GiB in bfloat16; `ripple generate "
            f"--dtype bfloat16` (gen {gen_length}, block {block_length}) peak resident {peak / 2**30:.2f} GiB "
            f"= {ratio:.2f}x the weights, {seconds:.0f} s end to end")
    return {"path": str(ckpt), "shards": len(files), "weight_bytes": weights, "peak_rss_bytes": peak,
            "ratio": ratio, "seconds": seconds, "text": text}
