"""`python -m ripple.bench` (`make bench`): what the engine and the grid path cost on this machine.
Measurements, not tests.

  python -m ripple.bench                      forward timings of a random-weight LLaDA-family model
                                              (medians of repeated runs; the packed lookahead against a
                                              plain forward per cache policy), one LLaDA2.0-mini MoE
                                              layer against a per-expert loop, the grid path's overhead
                                              (the demo grid through Ray local mode against one
                                              process), and throughput mode: the demo grid's samples
                                              per second at batch 1, 4 and 8
  python -m ripple.bench --preset llada-8b --device cuda --dtype bfloat16
                                              forwards, lookaheads (k 2, 4, 10) and decode TPS at batch
                                              1 and 8 of a random-weight model with LLaDA-8B-Instruct's
                                              shapes (`--preset tiny` on CPU); `--preset
                                              diffusion-gemma-26b`: DiffusionGemma's encoder and
                                              decoder passes and peak memory against the weights
  python -m ripple.bench --batch-equivalence  every demo-grid sample at batch 8 against batch 1, cache
                                              none, prefix and dual (tokens and NFE)
  python -m ripple.bench --write-checkpoint DIR [--layers N]; --load-memory DIR
                                              a random-weight checkpoint of --preset's shapes, and the
                                              peak memory of loading and decoding one (with --decoder
                                              and --set verifier=DIR2, a second model counted too)
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from ..errors import RippleError
from .presets import PRESETS, get_preset


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
    p = _Args(prog="python -m ripple.bench", description=__doc__,
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
    p.add_argument("--decoder", default="confidence", help="--load-memory: the decoder `ripple generate` runs "
                   "(one whose configuration names a second model, a verifier, loads and counts it too)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="--load-memory: a hyperparameter of --decoder (repeatable), e.g. verifier=DIR")
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
    from ..platform.experiments.spec import check_batch_size

    if args.reps is not None and args.reps < 1:
        raise RippleError(f"--reps must be positive, got {args.reps}")
    if args.batch_equivalence:
        from ..tasks import task_names
        from .batch_equivalence import check

        check_batch_size(args.batch_size, "--batch-size")
        if args.limit < 1:
            raise RippleError(f"--limit must be a positive number of samples per cell, got {args.limit}")
        report = check(args.model, _names(args.caches, CACHE_POLICIES, "cache policy"), args.batch_size, args.limit,
                       _names(args.decoders, names(), "decoder"), _names(args.tasks, task_names(), "task"),
                       progress=not args.json)
        print(json.dumps(report.to_dict()) if args.json else report.format())
        return 1 if report.unexplained else 0
    if args.write_checkpoint is not None:
        from .random_checkpoint import write_random_checkpoint

        preset = get_preset(args.preset or "llada2-mini")
        n = write_random_checkpoint(preset.config, args.write_checkpoint, layers=args.layers,
                                    dtype=getattr(torch, args.dtype if args.dtype != "float32" else "bfloat16"))
        print(f"wrote {n / 2**30:.2f} GiB of random {preset.name} weights to {args.write_checkpoint}")
        return 0
    if args.load_memory is not None:
        from .load_memory import load_memory

        from ..decoders import get

        get(args.decoder)  # an unknown name is one line, with the accepted ones
        settings = dict(pair.split("=", 1) for pair in args.set if "=" in pair)
        if len(settings) != len(args.set):
            raise RippleError(f"--set takes KEY=VALUE, got {next(p for p in args.set if '=' not in p)!r}")
        report = load_memory(args.load_memory, decoder=args.decoder, settings=settings)
        print(json.dumps(report) if args.json else report["text"])
        return 0
    if args.preset is not None:
        from ..platform.runtime.models import get_family
        from .canvas_report import run_canvas_preset
        from .preset_report import run_preset

        preset = get_preset(args.preset)
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise RippleError(f"--device {args.device}: no CUDA device here; use --device cpu (e.g. --preset tiny)")
        # a uniform-noise family (DiffusionGemma) is not decoded by the mask engine: its own passes are timed
        run = run_preset if get_family(preset.config["model_type"]).noise == "mask" else run_canvas_preset
        report = run(preset, args.device, args.dtype, reps=args.reps or 10, budget_s=args.budget_seconds,
                     log=(lambda s: None) if args.json else (lambda s: print(s, file=sys.stderr)))
        print(json.dumps(report.to_dict()) if args.json else report.format())
        return 0
    sizes = _sizes(args.batch_sizes)
    if args.batch_limit < 1:
        raise RippleError(f"--batch-limit must be positive, got {args.batch_limit}")
    from .forwards import format_forwards, run_forwards
    from .moe_layer import format_moe, moe_layer

    r = run_forwards(reps=args.reps or 15, device=args.device, dtype=args.dtype)
    moe = None if args.no_moe else moe_layer(torch.device(args.device), reps=min(args.reps or 5, 5))
    g = None
    if not args.no_grid:
        from .grid_overhead import grid_overhead, print_grid_overhead  # Ray: imported only when used

        g = grid_overhead(args.grid_limit)
    b = None
    if not args.no_batches:
        from .batch_throughput import run_batch_bench

        b = run_batch_bench(args.batch_limit, sizes, args.model, progress=not args.json)
    if args.json:
        print(json.dumps({**r, "moe": moe, "grid": g, "batches": b.to_dict() if b else None}))
        return 0
    print(format_forwards(r))
    if moe is not None:
        print(format_moe(moe))
    if g is not None:
        print_grid_overhead(g)
    if b is not None:
        print(b.format())
    return 0
