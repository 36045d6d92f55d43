"""Peak host memory of loading and decoding a checkpoint, against its weight bytes.

`ripple generate --dtype bfloat16 --device cpu` runs in a child process; its peak resident set
(the kernel's ru_maxrss of the child) over the bytes its weights take in bfloat16 is the figure:
the streaming loader (ripple/platform/runtime/loading.py) reads each tensor straight into its
parameter, so the ratio is the weights plus the interpreter, torch and the decode's activations.
A decoder whose configuration names a second model (`--decoder apd --set verifier=DIR`: a verifier the
child loads beside the dLLM) has both counted: the report lists each checkpoint's bytes and the ratio is
over their sum.
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


def load_parts(path: str, decoder="confidence", settings: dict[str, str] | None = None) -> list[tuple[str, Path, int]]:
    """(role, checkpoint folder, weight bytes in bfloat16) of everything a `ripple generate` with `decoder`
    and its hyperparameter `settings` loads: the dLLM, then each second model the configuration names (the
    hyperparameter is the role, e.g. `verifier`)."""
    from ..decoders import get
    from ..platform.runtime.loading import resolve_model_dir

    ckpt = Path(path)
    read_config(ckpt)  # a folder without a valid config.json is one line before anything runs
    cls = get(decoder) if isinstance(decoder, str) else decoder
    params = cls.Params.from_strings(cls.name, dict(settings or {}))
    parts = [("dLLM", ckpt)] + [(hp, resolve_model_dir(name)) for hp, name in params.auxiliary_models().items()]
    for _, folder in parts[1:]:
        read_config(folder)
    return [(role, folder, weight_bytes(weight_files(folder), torch.bfloat16)) for role, folder in parts]


PROMPT = "The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly."


def prompt_ids(ckpt: Path, n: int = 16) -> list[int]:
    """An n-token prompt of ordinary text: the checkpoint's tokenizer's ids for PROMPT (repeated up to n), never a
    mask, end or pad id, which `ripple generate` refuses or stops on; without a tokenizer, the lowest ids that
    config.json names as no special token."""
    from ..platform.runtime.loading import has_tokenizer, load_tokenizer

    if has_tokenizer(ckpt):
        text = load_tokenizer(ckpt).encode(PROMPT, add_special_tokens=False)
        if text:
            return (text * (n // len(text) + 1))[:n]
    special = set()
    for key, value in read_config(ckpt).items():
        if key.endswith("token_id") and value is not None:
            special.update(int(v) for v in (value if isinstance(value, list) else [value]))
    ids = (i for i in range(1, 2**31) if i not in special)
    return [next(ids) for _ in range(n)]


def load_memory(path: str, gen_length: int = 32, block_length: int = 32, decoder: str = "confidence",
                settings: dict[str, str] | None = None) -> dict:
    ckpt = Path(path)
    parts = load_parts(path, decoder, settings)
    files = weight_files(ckpt)
    weights = sum(n for _, _, n in parts)
    ids = ",".join(str(i) for i in prompt_ids(ckpt))
    argv = [sys.executable, "-m", "ripple.cli", "generate", "--model", str(ckpt), "--input-ids", ids,
            "--decoder", decoder, "--gen-length", str(gen_length), "--block-length", str(block_length),
            "--dtype", "bfloat16", "--device", "cpu", "--json"]
    argv += [a for k, v in (settings or {}).items() for a in ("--set", f"{k}={v}")]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise RippleError(f"ripple generate on {ckpt} failed: {last}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux reports KiB
    ratio = peak / weights
    both = "" if len(parts) == 1 else " (" + " + ".join(f"{role} {n / 2**30:.2f}" for role, _, n in parts) + ")"
    text = (f"{ckpt}: {len(files)} shard(s), weights {weights / 2**30:.2f} GiB in bfloat16{both}; `ripple generate "
            f"--dtype bfloat16` (gen {gen_length}, block {block_length}) peak resident {peak / 2**30:.2f} GiB "
            f"= {ratio:.2f}x the weights, {seconds:.0f} s end to end")
    return {"path": str(ckpt), "shards": len(files), "weight_bytes": weights, "peak_rss_bytes": peak,
            "ratio": ratio, "seconds": seconds, "text": text,
            "parts": [{"role": role, "path": str(folder), "weight_bytes": n} for role, folder, n in parts]}
