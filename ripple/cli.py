"""The `ripple` command. Bad input prints one line naming the problem and exits 2."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from .errors import RippleError, stop_on_sigterm, was_terminated


def _shipped(folder: str) -> str:
    """The shipped specs in a package folder, for --help; globbed here because importing the
    spec modules would load torch for every command."""
    return ", ".join(sorted(p.stem for p in (Path(__file__).parent / folder).glob("*.yaml")))


EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors on one line (no usage dump) with exit status 2."""

    def error(self, message: str):  # noqa: D401
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


_EPILOG = {
    "eval": """examples:
  ripple eval --model ripple-tiny --task arith --decoder confidence --set tau=0.9 --limit 200
  ripple eval --model ripple-tiny --task pyfunc --decoder default --gen-length 48 --block-length 16 --json
  ripple eval --model GSAI-ML/LLaDA-8B-Instruct --task gsm8k --chat --decoder rps --gen-length 256 \\
      --block-length 32 --limit 100                   # dataset from the hub, or --data-dir ../shared/data""",
    "lm-eval": """Every argument after `lm-eval` goes to lm-evaluation-harness's own CLI (0.4.13), with the
`ripple` model registered; --data-dir DIR (Ripple's, anywhere in the line) adds an --include_path
that makes gsm8k, minerva_math500, humaneval and mbpp read DIR (laid out like ../shared/data).

examples:
  ripple lm-eval --model ripple --model_args pretrained=ripple-tiny,decoder=rps,gen_length=64,block_length=16 \
      --tasks gsm8k --limit 20 --data-dir ../shared/data --log_samples --output_path runs/lm-eval
  HF_ALLOW_CODE_EVAL=1 ripple lm-eval --model ripple --model_args pretrained=GSAI-ML/LLaDA-8B-Instruct,decoder=confidence,tau=0.9,cache=dual \
      --tasks humaneval --confirm_run_unsafe_code --apply_chat_template
""",
    "tasks": """examples:
  ripple tasks list
  ripple tasks verify humaneval --data-dir ../shared/data
  ripple tasks verify gsm8k --json                    # dataset from the hub or $RIPPLE_DATA_DIR""",
    "grid": """examples:
  ripple grid demo                                     # a shipped spec by name, Ray in-process
  ripple grid my-grid.yaml --experiment try1 --limit 5 --store results
  ripple grid paper-table1 --dry-run                   # validate and count cells, run nothing
  ripple grid demo --batch-size 8 --experiment demo-b8 # throughput mode: 8 samples of a cell per engine call
  ray job submit --working-dir . -- ripple grid paper-table1 --store ~/ripple-results   # on a cluster""",
    "sweep": """examples:
  ripple sweep tiny-demo --experiment tiny-sweep --limit 20   # shipped spec: 4 RPS trials on ripple-tiny
  ripple sweep rps-lambda --experiment sweep-lambda           # the paper's lambda sweep (GPU workers)
  ripple sweep rps-table3 --experiment sweep-table3 --trials 16 --store ~/ripple-results
  ripple sweep my-sweep.yaml --experiment try1 --dry-run      # validate and print the plan, run nothing
  ripple report tiny-sweep                                    # the trials in the sensitivity table""",
    "ui": """examples:
  ripple ui                                            # MLflow UI on http://127.0.0.1:5000 for ./results
  ripple ui --store ~/ripple-results --port 5001""",
    "train-tiny": """examples:
  ripple train-tiny --out runs/ripple-tiny            # the shipped model's recipe (resumes if interrupted)
  ripple train-tiny --out /tmp/micro --preset micro --steps 20
  ripple train-tiny --family llada2 --out runs/ripple-tiny-bd --threads 1   # ripple-tiny-bd's recipe""",
    "generate": """examples:
  ripple generate --model ../shared/golden/llada-tiny --input-ids 5,6,7 --decoder confidence --set tau=0.9 \\
      --gen-length 32 --block-length 8 --cache prefix --json
  ripple generate --model GSAI-ML/LLaDA-8B-Instruct --prompt "What is 7*8?" --chat --decoder default \\
      --gen-length 256 --block-length 32 --dtype bfloat16 --device cuda
  ripple generate --model ../shared/golden/diffusion-gemma-tiny --input-ids 5,6,7 --decoder renoise \\
      --set steps=8 --gen-length 16 --block-length 8 --seed 3 --trace /tmp/renoise.jsonl   # a uniform-noise model""",
    "report": """examples:
  ripple report demo                                   # ./results/demo/report/{report.md,report.html,*.png}
  ripple report sweep-lambda --store ~/ripple-results --out reports/lambda
  ripple report demo --no-tracking                     # do not log the folder to MLflow""",
    "leaderboard": """examples:
  ripple leaderboard                                   # every experiment in ./results -> ./results/leaderboard/
  ripple leaderboard --store ~/ripple-results --out reports/leaderboard
  (leaderboard.html: sortable tables and accuracy-vs-TPF plots; leaderboard.md; leaderboard.csv)""",
    "analyze": """examples:
  ripple analyze --model ripple-tiny --task arith --limit 20      # runs/analyze/ripple-tiny-arith/
  ripple analyze --model ripple-tiny --task pyfunc --oracle reference --out docs/figures/pyfunc
  ripple analyze --model GSAI-ML/LLaDA-8B-Instruct --task gsm8k --chat --gen-length 256 \\
      --block-length 32 --limit 50 --dtype bfloat16 --device cuda""",
    "prior": """examples:
  ripple prior --model ripple-tiny --task arith --task pyfunc --task freefunc --text both --limit 2000 \\
      --out priors/ripple-tiny.json
  ripple prior --model GSAI-ML/LLaDA-8B-Instruct --jsonl data/gsm8k.jsonl --field question --out priors/llada.json
  ripple generate --model ripple-tiny --prompt "12+7=" --decoder pc_sampler --set prior=priors/ripple-tiny.json \\
      --gen-length 48 --block-length 16""",
}


def parse_settings(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise RippleError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def parse_ids(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p.lstrip("-").isdigit() for p in parts) or not text.strip():
        raise RippleError(f"--input-ids expects comma-separated token ids like 1,2,3, got {text!r}")
    ids = [int(p) for p in parts]
    if any(i < 0 for i in ids):
        raise RippleError(f"--input-ids must be non-negative token ids, got {text!r}")
    return ids


def refuse_mask(ids: Sequence[int], mask_id: int | None) -> None:
    if mask_id is not None and mask_id in ids:
        raise RippleError(f"--input-ids contains the model's mask id {mask_id}; a prompt cannot have holes")


# Output path options carry one of these metavars: `check_paths` finds them in the parser, so an
# option added later is checked before any work as soon as it is declared with one of them.
FILE, DIR = "FILE", "DIR"
EVAL_GEN_LENGTH, EVAL_BLOCK_LENGTH = 48, 16  # `ripple eval`'s lengths for a task without its own


def _write_probe(directory: Path, flag: str, given: str) -> None:
    """Write a nameless file in `directory`: os.access would say yes to root on a read-only filesystem."""
    try:
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as exc:
        raise RippleError(f"{flag} {given}: cannot write in {directory} ({exc.strerror or exc})") from None


def writable_path(path: str | Path, flag: str, kind: str) -> None:
    """Refuse an output path before any work starts: its folder must exist and take new files; a FILE
    must not be a directory, a DIR must not be a file (a missing DIR is created by the command)."""
    given = Path(path).expanduser()
    parent = given.parent
    try:
        if kind == FILE and given.is_dir():
            raise RippleError(f"{flag} {path}: is a directory, not a file")
        if kind == DIR and given.exists() and not given.is_dir():
            raise RippleError(f"{flag} {path}: is a file, not a directory")
        if not parent.exists():
            raise RippleError(f"{flag} {path}: directory {parent} does not exist")
        if not parent.is_dir():
            raise RippleError(f"{flag} {path}: {parent} is not a directory")
        if kind == FILE and given.exists():
            with open(given, "ab"):  # appends nothing: only asks whether the file takes writes
                pass
    except OSError as exc:
        raise RippleError(f"{flag} {path}: cannot reach it ({exc.strerror or exc})") from None
    if kind == DIR and given.is_dir():
        _write_probe(given, flag, str(path))
    else:
        _write_probe(parent.absolute(), flag, str(path) if kind == FILE else f"{path} (to be created)")


def path_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The output path options of `parser` itself (not of its subcommands)."""
    return [a for a in parser._actions if a.option_strings and a.metavar in (FILE, DIR)]


def chosen_parsers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[argparse.ArgumentParser]:
    """`parser` and the (sub)parsers of the command `args` were parsed for, outermost first."""
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
            out += chosen_parsers(action.choices[getattr(args, action.dest)], args)
    return out


def check_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every output path given on the command line, checked before the command runs."""
    for sub in chosen_parsers(parser, args):
        for action in path_options(sub):
            value = getattr(args, action.dest, None)
            if value is not None:
                writable_path(value, action.option_strings[-1], action.metavar)


def add_store_args(p: argparse.ArgumentParser) -> None:
    """--store and --tracking-uri, resolved alike by grid, sweep, report and ui."""
    p.add_argument("--store", default=None, metavar=DIR,
                   help="result store directory (default: $RIPPLE_STORE, else ./results; "
                   "~/ripple-results inside a submitted Ray job)")
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///STORE/mlflow.db)")


def add_decode_args(p: argparse.ArgumentParser, *, gen_default: int | None = None, block_default: int | None = None,
                    task_lengths: bool = False) -> None:
    """The decoding flags. `task_lengths`: the lengths default to the task's own (`Task.gen_length`, the
    block then equal to the response) and else to `gen_default` and `block_default`."""
    from .decoders import names

    p.add_argument("--decoder", required=True, help=f"decoder name: {', '.join(names())}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="decoder hyperparameter, repeatable (e.g. --set tau=0.9)")
    if task_lengths:
        p.add_argument("--gen-length", type=int, default=None,
                       help=f"response length (default: the task's own, e.g. 32 for ParallelBench's waiting line, "
                            f"else {gen_default})")
        p.add_argument("--block-length", type=int, default=None,
                       help=f"block length (default: the response for a task with its own length, else {block_default})")
    else:
        p.add_argument("--gen-length", type=int, required=gen_default is None, default=gen_default)
        p.add_argument("--block-length", type=int, required=block_default is None, default=block_default)
    p.add_argument("--cache", default=None, help="KV cache policy: none, prefix, dual (default: the decoder's, "
                   "none for mask decoders, prefix for renoise)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of each sample's random generator (decoders that draw: renoise, topk's rank=random); default 0. "
                        "eval derives each example's seed from it and the example id, as grids do")
    p.add_argument("--dtype", default="auto", help="auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16, float16")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument("--block-align", default="response", choices=("response", "absolute"),
                   help="where blocks start: response (block b = response positions b*L..; default) or absolute "
                        "(aligned to position 0 as dInfer runs LLaDA: the first block holds the prompt's tail, the "
                        "last one is shorter; block-diffusion families are always aligned to 0)")
    p.add_argument("--sub-block-length", type=int, default=None, metavar="S",
                   help="decode each block in sub-blocks of S positions, left to right (Fast-dLLM v2's small "
                        "blocks; S divides the block length; default: the block length, no sub-blocks)")
    p.add_argument("--stop-at-eos", action="store_true",
                   help="stop after the block in which an end-of-sequence token was committed (Fast-dLLM v2: "
                        "as soon as the response holds one with no mask before it, as its generate does)")
    p.add_argument("--eos-early-stop", action="store_true",
                   help="stop right after a step that commits an end-of-sequence token with no mask before it "
                        "(LLaDA2's eos_early_stop: same tokens, fewer forwards)")


def decoder_for_model(args: argparse.Namespace):
    """The decoder of --decoder/--set for --model, before any weights load: bad names and values fail
    first, then a decoder made for another kind of family (one line naming what the model needs); the
    settings not given with --set come from the model's generation_config.json where the decoder
    reads it (`Scheduler.model_defaults`)."""
    from .decoders import build, check_noise
    from .platform.runtime.loading import config_noise, generation_defaults

    settings = parse_settings(args.set)
    decoder = build(args.decoder, settings)
    check_noise(decoder.name, *config_noise(args.model))
    defaults = type(decoder).model_defaults(generation_defaults(args.model))
    return build(args.decoder, {**defaults, **settings}) if defaults else decoder


def cmd_generate(args: argparse.Namespace) -> int:
    from .platform.runtime.engine import Engine, GenerationConfig
    from .platform.experiments.evaluate import completion_text
    from .platform.runtime.loading import (block_aligned, config_mask_id, load_model, load_tokenizer,
                                           refuse_prompt_ids, resolve_model_dir)

    decoder = decoder_for_model(args)
    args.cache = args.cache or decoder.default_cache
    config = GenerationConfig(args.gen_length, args.block_length, args.cache, args.stop_at_eos,
                              args.eos_early_stop, block_aligned(args.model, args.gen_length, args.block_length),
                              args.block_align, args.sub_block_length)
    ids = parse_ids(args.input_ids) if args.input_ids is not None else None
    if ids is not None:
        if args.chat:
            raise RippleError("--chat applies to --prompt text, not to --input-ids")
        refuse_mask(ids, config_mask_id(args.model))  # before the weights load
    tok = load_tokenizer(resolve_model_dir(args.model))
    if ids is None:
        if tok is None:
            raise RippleError(f"model {args.model!r} has no tokenizer files; pass --input-ids instead of --prompt")
        from .tasks.prompting import encode_prompt

        ids = encode_prompt(tok, args.prompt, chat=args.chat)
    refuse_prompt_ids(args.model, ids)  # the user's prompt only, before the weights load
    lm = load_model(args.model, dtype=args.dtype, device=args.device, tokenizer=tok)
    refuse_mask(ids, lm.mask_id)  # a mask named only by the tokenizer
    vocab = lm.model.vocab_size
    if max(ids) >= vocab:
        raise RippleError(f"--input-ids contains id {max(ids)}, outside the model's vocabulary of {vocab}")
    trace_file = open(args.trace, "w") if args.trace else None
    try:
        trace = (lambda ev: trace_file.write(json.dumps(ev) + "\n")) if trace_file else None
        out = Engine.from_loaded(lm).generate([ids], decoder, config, trace=trace, seeds=[args.seed])[0]
    finally:
        if trace_file:
            trace_file.close()
    text = completion_text(tok, out) if tok is not None else None
    record = {
        "model": args.model, "decoder": decoder.name, "params": decoder.params.to_dict(),
        "gen_length": config.gen_length, "block_length": config.block_length, "cache": config.cache,
        "prompt_tokens": len(ids), "tokens": list(out.tokens), "text": text, "nfe": out.nfe,
        "lookahead_nfe": out.lookahead_nfe, "decode_seconds": out.decode_seconds,
        "generated_tokens": out.generated_tokens, "tps": out.tps, "canvas_tps": out.canvas_tps,
        "edits": out.edits, "encoder_nfe": out.encoder_nfe, "seed": args.seed,
    }
    if args.json:
        print(json.dumps(record))
    else:
        print(text if text is not None else " ".join(map(str, out.tokens)))
        print(f"-- nfe {out.nfe}" + (f" ({out.encoder_nfe} encoder passes)" if out.encoder_nfe else "")
              + f" | generated {out.generated_tokens} tokens in {out.decode_seconds:.3f}s | "
              f"TPS {out.tps:.1f} (canvas TPS {out.canvas_tps:.1f})" + (f" | {out.edits} edits" if out.edits else ""),
              file=sys.stderr)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .platform.runtime.engine import GenerationConfig
    from .platform.experiments.evaluate import evaluate_cell
    from .platform.runtime.loading import block_aligned, load_model
    from .tasks import get_task

    from .tasks import task_class

    decoder = decoder_for_model(args)
    args.cache = args.cache or decoder.default_cache
    task_length = task_class(args.task).gen_length  # a task's own response length (ParallelBench: 32, 64)
    if args.gen_length is None:
        args.gen_length = task_length or EVAL_GEN_LENGTH
    if args.block_length is None:  # a task with its own length runs with the block equal to the response
        args.block_length = args.gen_length if task_length else EVAL_BLOCK_LENGTH
    config = GenerationConfig(args.gen_length, args.block_length, args.cache, args.stop_at_eos,
                              args.eos_early_stop, block_aligned(args.model, args.gen_length, args.block_length),
                              args.block_align, args.sub_block_length)
    if args.limit is not None and args.limit < 1:
        raise RippleError(f"--limit must be a positive number of examples, got {args.limit}")
    task = get_task(args.task, data_dir=args.data_dir)
    task.examples("test", 1)  # read the data now: a missing dataset fails before the model loads
    lm = load_model(args.model, dtype=args.dtype, device=args.device)
    sink = open(args.samples_out, "w") if args.samples_out else None
    try:
        write = (lambda r: (sink.write(json.dumps(r.__dict__) + "\n"), sink.flush())) if sink else None
        cell = evaluate_cell(lm, task, decoder, config, limit=args.limit, progress=not args.json, chat=args.chat,
                             on_sample=write, seed=args.seed)
    finally:
        if sink:
            sink.close()
    summary = cell.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{task.name} | {decoder.name} {decoder.params.to_dict()} | cache {config.cache} | n {cell.n}")
        m = cell.stats
        tpf = "-" if m.tpf is None else f"{m.tpf:.2f}"
        print(f"accuracy {m.accuracy_text()} % (95 % Wilson interval {m.accuracy_lo:.1f} to {m.accuracy_hi:.1f}) | "
              f"mean NFE {m.mean_nfe:.2f} | TPF {tpf} | TPS {m.tps:.1f} (canvas TPS {m.canvas_tps:.1f})"
              + ("" if m.mean_edits is None else f" | edits/sample {m.mean_edits:.2f}"))
        if m.strict is not None:  # ParallelBench's second figure: the same rule on strictly formatted answers
            print(f"strict {m.strict:.1f} % (ParallelBench's score_strict: the same rule on a strictly formatted answer)")
    return 0


def _option(argv: Sequence[str], name: str) -> str | None:
    """The value of `name` in an argument list (`name value` or `name=value`), or None."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.partition("=")[2]
    return None


def cmd_lm_eval(argv: Sequence[str]) -> int:
    """lm-evaluation-harness's CLI with `--model ripple` available (module harness.py says why a wrapper)."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise RippleError("lm-evaluation-harness is not installed; pip install 'ripple-dllm[lmeval]' "
                          "(make test installs it)") from None
    from .platform.experiments.harness import MODEL_NAME, RippleLM, check_model_args, task_configs

    argv, data_dir = list(argv), None
    if _option(argv, "--model") == MODEL_NAME and isinstance(_option(argv, "--model_args"), str):
        from lm_eval.utils import simple_parse_args_string

        check_model_args(**simple_parse_args_string(_option(argv, "--model_args")))  # before the harness's slow start
    for i, arg in enumerate(argv):
        if arg == "--data-dir" or arg.startswith("--data-dir="):
            data_dir = arg.partition("=")[2] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            del argv[i: i + (1 if "=" in arg else 2)]
            if not data_dir:
                raise RippleError("--data-dir needs a directory laid out like ../shared/data")
            break
    with tempfile.TemporaryDirectory(prefix="ripple-lm-eval-") as folder:
        if data_dir is not None:
            include = str(task_configs(data_dir, folder))
            if "--include_path" in argv:
                at = argv.index("--include_path") + 1
                argv[at] = f"{argv[at]}:{include}" if at < len(argv) else include
            else:
                argv += ["--include_path", include]
        from lm_eval.__main__ import cli_evaluate

        saved, sys.argv = sys.argv, ["lm_eval", *argv]
        try:
            cli_evaluate()
        finally:
            sys.argv = saved
    for lm in RippleLM.instances:
        for line in lm.summary():
            print(line)
    return 0


def cmd_tasks_list(args: argparse.Namespace) -> int:
    from .tasks import task_class, task_names
    from .tasks.base import refused_tasks, task_source

    rows = []
    for name in task_names():
        cls = task_class(name)
        data = getattr(cls, "data_source", None) or ", ".join(getattr(cls, "hub_ids", ())) or "generated (synthetic)"
        plugin = task_source(name)
        # `source` is where the data come from (as before plugins existed); `provider` where the task does
        rows.append({"task": name, "metric": cls.metric, "source": data,
                     "provider": "built-in" if plugin is None else str(plugin), "options": list(cls.options),
                     "doc": ((cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip().splitlines() or [""])[0]})
    broken = [{"task": b.name, "provider": str(b.source), "refused": b.error} for b in refused_tasks()]
    if args.json:
        print(json.dumps(rows + broken))
        return 0
    width = max(len(r["task"]) for r in rows + broken)
    metric_width = max(len(r["metric"]) for r in rows)
    for r in rows:
        print(f"{r['task']:<{width}}  {r['metric']:<{metric_width}} {r['provider']:<10} {r['source']}")
    for b in broken:
        print(f"{b['task']:<{width}}  REFUSED ({b['provider']}): {b['refused']}")
    return 0


def cmd_decoders(args: argparse.Namespace) -> int:
    """Every registered decoder: where it comes from, what it declares, its hyperparameters."""
    from .decoders import get, names
    from .decoders.params import range_text, field_kind, public_name
    from .decoders.registry import refused, source

    import dataclasses

    rows = []
    for name in names():
        cls = get(name)
        plugin = source(name)
        props = {p: getattr(cls, p) for p in DECODER_PROPERTIES}
        hps = [{"name": public_name(f), "default": f.default, "accepted": range_text(f.metadata, field_kind(f)),
                "search": list(f.metadata["search"]) if f.metadata.get("search") else None,
                "doc": f.metadata.get("doc", "")} for f in dataclasses.fields(cls.Params)]
        rows.append({"decoder": name, "provider": "built-in" if plugin is None else str(plugin),
                     "properties": {k: list(v) if isinstance(v, tuple) else v for k, v in props.items()},
                     "hyperparameters": hps})
    broken = [{"decoder": b.name, "provider": str(b.source), "refused": b.error} for b in refused()]
    if args.json:
        print(json.dumps(rows + broken))
        return 0
    for b in broken:
        print(f"{b['decoder']}  ({b['provider']}; REFUSED: {b['refused']})")
    for r in rows:
        declared = [k for k, v in r["properties"].items() if v is True]
        caches = ",".join(r["properties"]["supported_caches"])
        print(f"{r['decoder']}  ({r['provider']}; caches {caches}{'; ' + ', '.join(declared) if declared else ''})")
        for h in r["hyperparameters"]:
            print(f"    {h['name']} = {h['default']!r}  ({h['accepted']})")
    return 0


# what a decoder declares and the engine acts on (ripple/decoders/base.py), as `ripple decoders` lists it
DECODER_PROPERTIES = ("uses_lookahead", "uses_shadow", "needs_rows_beyond_block", "edits_tokens", "shortens_canvas",
                      "defers_masks", "decides_first_position", "idle_steps", "supported_caches")


def cmd_tasks_verify(args: argparse.Namespace) -> int:
    from .tasks import get_task
    from .tasks.verify import verify_task

    if args.limit is not None and args.limit < 1:
        raise RippleError(f"--limit must be a positive number of examples, got {args.limit}")
    if args.workers is not None and args.workers < 1:
        raise RippleError(f"--workers must be positive, got {args.workers}")
    report = verify_task(get_task(args.name, data_dir=args.data_dir), limit=args.limit, workers=args.workers,
                         progress=not args.json)
    if args.json:
        print(json.dumps(report.to_dict()))
        return 0
    print(f"{report.task}: n {report.n} | gold accuracy {report.gold_accuracy:.1f}% | "
          f"wrong accuracy {report.wrong_accuracy:.1f}% | {report.seconds:.1f}s")
    for failure in report.gold_failures:
        print(f"  gold failure {failure.id}: {failure.reason}")
    for sample_id in report.wrong_passes:
        print(f"  wrong completion passed: {sample_id}")
    return 0


def cmd_train_tiny(args: argparse.Namespace) -> int:
    from .platform.training.train import FAMILY_PRESETS, PRESETS, train

    family = {"llada2": "llada2_moe"}.get(args.family, args.family)
    if family is not None and family not in FAMILY_PRESETS:
        raise RippleError(f"unknown family {args.family!r}; accepted: llada, llada2 (= llada2_moe)")
    if args.preset is None:
        args.preset = FAMILY_PRESETS[family or "llada"]
    if args.preset not in PRESETS:
        raise RippleError(f"unknown preset {args.preset!r}; accepted: {', '.join(PRESETS)}")
    if family is not None and PRESETS[args.preset]("-").family != family:
        accepted = [name for name in PRESETS if PRESETS[name]("-").family == family]
        raise RippleError(f"preset {args.preset!r} is not of family {args.family!r}; accepted: {', '.join(accepted)}")
    overrides = {k: v for k, v in {"steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
                                   "seed": args.seed}.items() if v is not None}
    for key, value in overrides.items():
        if value <= 0 and key != "seed":
            raise RippleError(f"--{key.replace('_', '-')} must be positive, got {value}")
    if args.mix is not None:
        try:
            overrides["mix"] = tuple(int(x) for x in args.mix.split(","))
        except ValueError:
            raise RippleError(f"--mix takes comma-separated positive integers, got {args.mix!r}") from None
    if args.threads is not None:
        if args.threads <= 0:
            raise RippleError(f"--threads must be positive, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)
    if args.stop_at is not None and args.stop_at <= 0:
        raise RippleError(f"--stop-at must be positive, got {args.stop_at}")
    cfg = PRESETS[args.preset](args.out, **overrides)
    summary = train(cfg, resume=not args.no_resume, stop_at=args.stop_at)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The demo grid through the grid path (one table), then the leaderboard of the store (every
    experiment in it) and its path: grid then leaderboard, as `make demo` runs them."""
    from .dashboards.leaderboard import build_leaderboard, summary_line
    from .platform.experiments.demo import demo_spec
    from .platform.experiments.grid import default_store, format_table, run_grid

    root = default_store()
    run = run_grid(demo_spec(args.model, args.limit, args.cache), root, fresh=True)
    print(format_table(run))
    print(summary_line(build_leaderboard(root)))
    return 0


def cmd_grid(args: argparse.Namespace) -> int:
    from .platform.experiments.grid import default_store, format_table, load_spec, run_grid, summary_json

    spec = load_spec(args.spec).with_limit(args.limit).with_data_dir(args.data_dir).with_batch_size(args.batch_size)
    if args.workers is not None and args.workers < 1:
        raise RippleError(f"--workers must be positive, got {args.workers}")
    if args.dry_run:
        print(summary_json(spec) if args.json else spec.describe())
        return 0
    if args.store is None:  # a given --store was checked with every other path before the command ran
        writable_path(default_store(), "--store", DIR)
    run = run_grid(spec, args.store or default_store(), experiment=args.experiment, tracking_uri=args.tracking_uri,
                   track=not args.no_tracking, fresh=args.fresh, progress=not args.json, workers=args.workers)
    print(summary_json(spec, run) if args.json else format_table(run))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from .platform.experiments.grid import default_store
    from .sweeps.run import format_table, run_sweep, summary_json
    from .sweeps.spec import load_sweep_spec

    spec = load_sweep_spec(args.spec).with_overrides(experiment=args.experiment, limit=args.limit,
                                                     trials=args.trials, data_dir=args.data_dir,
                                                     batch_size=args.batch_size)
    if args.workers is not None and args.workers < 1:
        raise RippleError(f"--workers must be positive, got {args.workers}")
    if args.dry_run:
        print(spec.describe())
        return 0
    if args.store is None:  # a given --store was checked with every other path before the command ran
        writable_path(default_store(), "--store", DIR)
    run = run_sweep(spec, args.store or default_store(), tracking_uri=args.tracking_uri, track=not args.no_tracking,
                    progress=not args.json, workers=args.workers)
    print(summary_json(run) if args.json else format_table(run))
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    import os

    from .platform.experiments.grid import default_store
    from .platform.experiments.tracking import ui_command, ui_url

    cmd, env = ui_command(args.store or default_store(), args.tracking_uri, args.port)
    print(f"MLflow UI on {ui_url(args.port)} ({cmd[cmd.index('--backend-store-uri') + 1]}); Ctrl-C stops it",
          file=sys.stderr)
    os.execvpe(cmd[0], cmd, env)  # the server replaces this process, so stopping `ripple ui` stops it


def cmd_report(args: argparse.Namespace) -> int:
    from .dashboards.report import build_report
    from .platform.experiments.grid import default_store

    report = build_report(args.store or default_store(), args.experiment, args.out, tracking_uri=args.tracking_uri,
                          track=not args.no_tracking)
    where = f"; logged to MLflow run {report.mlflow_run_id}" if report.mlflow_run_id else ""
    where += f"; {report.set_aside_text()}" if report.set_aside[0] else ""
    print(f"report of {report.experiment}: {report.out_dir / 'report.html'} ({report.cells.height} cells, "
          f"{len(report.figures)} figures){where}")
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from .dashboards.leaderboard import build_leaderboard, summary_line
    from .platform.experiments.grid import default_store

    print(summary_line(build_leaderboard(args.store or default_store(), args.out)))  # paths checked by main()
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from .dashboards.analyze import run_analysis

    result = run_analysis(args.model, args.task, limit=args.limit, out_dir=args.out, gen_length=args.gen_length,
                          block_length=args.block_length, oracle=args.oracle, chat=args.chat, data_dir=args.data_dir,
                          dtype=args.dtype, device=args.device, batch_size=args.batch_size, progress=not args.json)
    s = result.summary
    if args.json:
        print(json.dumps({**{k: v for k, v in s.items() if k != "curve"}, "out": str(result.out_dir)}))
        return 0
    mid = s["mid_entropy_not_top1_fraction"]
    print(f"{s['points']} points from {s['states']} block states of {s['examples']} examples; mean reduction by "
          f"entropy tercile (low/mid/high): "
          + " / ".join(f"{s['terciles'][t]['mean_reduction']:.4f}" for t in ("low", "mid", "high"))
          + f" nats; mid-entropy oracle not top-1: {mid:.3f}")
    print(f"figure {result.figure}; summary {result.out_dir / 'summary.md'}")
    return 0


def cmd_prior(args: argparse.Namespace) -> int:
    """PC-Sampler's token-frequency prior: every token of the texts, counted with the model's tokenizer."""
    from .decoders.pc_sampler import count_prior
    from .platform.runtime.loading import load_tokenizer, read_config, resolve_model_dir
    from .platform.runtime.models import get_family

    if args.limit is not None and args.limit < 1:
        raise RippleError(f"--limit must be a positive number of examples, got {args.limit}")
    path = resolve_model_dir(args.model)
    tok = load_tokenizer(path)
    if tok is None:
        raise RippleError(f"model {args.model!r} has no tokenizer files; a prior counts the tokenizer's ids")
    cfg = read_config(path)
    vocab = int(get_family(cfg["model_type"]).to_config(cfg).vocab_size)  # the rows the model predicts, as it loads
    if args.jsonl:
        texts = _jsonl_texts(args.jsonl, args.field, args.limit)
        source = f"{Path(args.jsonl).name}:{args.field}"
    else:
        from .tasks import get_task

        fields = {"prompt": ("prompt",), "reference": ("reference",), "both": ("prompt", "reference")}[args.text]
        texts = []
        for name in args.task:
            task = get_task(name, data_dir=args.data_dir)
            texts += [getattr(ex, f) for ex in task.examples(args.split, args.limit) for f in fields]
        source = f"tasks {', '.join(args.task)} ({args.split}, {args.text})"
    prior = count_prior((tok(t, add_special_tokens=False)["input_ids"] for t in texts), vocab, source)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(prior, indent=1) + "\n")
    print(f"{out}: {prior['num_token']} tokens of {len(texts)} texts, {len(prior['p_baseline_dict'])} distinct ids "
          f"of {vocab}")
    return 0


def _jsonl_texts(path: str, field: str, limit: int | None) -> list[str]:
    """The `field` of each line of a JSON-lines file (the authors count GSM8K's `question`)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise RippleError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    texts = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise RippleError(f"{path} line {n} is not JSON") from None
        if not isinstance(row, dict) or not isinstance(row.get(field), str):
            raise RippleError(f"{path} line {n} has no text field {field!r}")
        texts.append(row[field])
        if limit is not None and len(texts) >= limit:
            break
    return texts


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ripple", description="Benchmark and sweep parallel decoders of diffusion LMs.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    sub.required = True

    g = sub.add_parser("generate", help="decode one prompt with one decoder",
                       epilog=_EPILOG["generate"], formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--model", required=True, help="checkpoint directory, hub id, or embedded name (ripple-tiny)")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text (needs a tokenizer)")
    src.add_argument("--input-ids", help="comma-separated prompt token ids")
    g.add_argument("--chat", action="store_true", help="wrap --prompt in the model's chat template")
    add_decode_args(g)
    g.add_argument("--trace", metavar=FILE, help="write the decode trace as JSON lines")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.set_defaults(func=cmd_generate)

    e = sub.add_parser("eval", help="evaluate one cell: model x task x decoder", epilog=_EPILOG["eval"],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("--model", required=True, help="checkpoint directory, hub id, or embedded name (ripple-tiny)")
    e.add_argument("--task", required=True, help="task name (see `ripple tasks list`)")
    add_decode_args(e, gen_default=EVAL_GEN_LENGTH, block_default=EVAL_BLOCK_LENGTH, task_lengths=True)
    e.add_argument("--limit", type=int, default=None, help="evaluate the first N test examples")
    e.add_argument("--data-dir", default=None, help="local benchmark data laid out like ../shared/data "
                   "(default: $RIPPLE_DATA_DIR, else the Hugging Face hub)")
    e.add_argument("--chat", nargs="?", const="multiturn", default=None, choices=("multiturn", "singleturn"),
                   help="wrap each prompt in the model's chat template as lm-eval 0.4.13's --apply_chat_template "
                        "does: multiturn (default: each few-shot example its own turn) or singleturn "
                        "(--fewshot_as_multiturn false: the whole prompt as one user turn)")
    e.add_argument("--samples-out", metavar=FILE, help="also write one JSON line per sample")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.set_defaults(func=cmd_eval)

    t = sub.add_parser("train-tiny", help="train an embedded model (ripple-tiny, ripple-tiny-bd) on CPU", epilog=_EPILOG["train-tiny"],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--out", required=True, metavar=DIR, help="output directory (Hugging Face format; resumable)")
    t.add_argument("--steps", type=int, default=None)
    t.add_argument("--batch-size", type=int, default=None)
    t.add_argument("--lr", type=float, default=None)
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--family", default=None, help="llada (ripple-tiny, the default) or llada2 (ripple-tiny-bd: "
                   "block diffusion, MoE, mask and edit objectives)")
    t.add_argument("--preset", default=None, help="recipe: tiny / tiny-bd (the shipped models; the default of each "
                   "family) or micro / micro-bd (tests)")
    t.add_argument("--mix", default=None, metavar="A,B,C", help="examples of arith,pyfunc,freefunc per cycle of the "
                   "data stream")
    t.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    t.add_argument("--no-resume", action="store_true", help="start over even if a checkpoint exists")
    t.add_argument("--stop-at", type=int, default=None, metavar="STEP", help="stop after STEP with its checkpoint "
                   "written (same schedule as the full run): re-run a prefix and compare training/snapshots.jsonl")
    t.set_defaults(func=cmd_train_tiny)

    le = sub.add_parser("lm-eval", help="lm-evaluation-harness with Ripple's decoders (--model ripple)",
                        epilog=_EPILOG["lm-eval"], formatter_class=argparse.RawDescriptionHelpFormatter,
                        add_help=False)
    le.add_argument("harness_args", nargs=argparse.REMAINDER, help="lm_eval's own arguments")
    le.set_defaults(func=lambda args: cmd_lm_eval(args.harness_args))

    k = sub.add_parser("tasks", help="list tasks, or check a benchmark's scoring on its reference solutions",
                       epilog=_EPILOG["tasks"], formatter_class=argparse.RawDescriptionHelpFormatter)
    ksub = k.add_subparsers(dest="tasks_command", parser_class=_Parser, metavar="ACTION")
    k.add_argument("--json", action="store_true", help="with no ACTION: the list as JSON")
    k.set_defaults(func=cmd_tasks_list)  # `ripple tasks` alone lists them
    kl = ksub.add_parser("list", help="every registered task with its metric, source (built-in or plugin) and data")
    kl.add_argument("--json", action="store_true")
    kl.set_defaults(func=cmd_tasks_list)
    kv = ksub.add_parser("verify", help="score every reference solution and a wrong completion per example")
    kv.add_argument("name", help="benchmark: gsm8k, math500, humaneval, mbpp")
    kv.add_argument("--data-dir", default=None, help="local data laid out like ../shared/data")
    kv.add_argument("--limit", type=int, default=None, help="only the first N test examples")
    kv.add_argument("--workers", type=int, default=None, help="sandbox runs in parallel (default: cores, min 2)")
    kv.add_argument("--json", action="store_true", help="print one JSON object")
    kv.set_defaults(func=cmd_tasks_verify)

    r = sub.add_parser("grid", help="run a grid spec on Ray workers into the result store and MLflow",
                       epilog=_EPILOG["grid"], formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("spec", help=f"grid spec YAML, or a shipped spec name: {_shipped('platform/experiments/grids')}")
    r.add_argument("--experiment", default=None, help="experiment name (default: the spec's `experiment`)")
    add_store_args(r)
    r.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    r.add_argument("--limit", type=int, default=None, help="at most N samples per cell")
    r.add_argument("--workers", type=int, default=None, help="number of workers (default: one per GPU, else per "
                   "`workers.cpus` CPUs)")
    r.add_argument("--data-dir", default=None, help="local benchmark data (default: the spec's, $RIPPLE_DATA_DIR, hub)")
    r.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="samples of a cell decoded together in one engine call (default: the spec's, else 1); "
                        "same tokens, more samples per second; TPS and speedup stay batch-1 figures")
    r.add_argument("--fresh", action="store_true", help="forget this experiment's stored samples and recompute them")
    r.add_argument("--dry-run", action="store_true", help="validate the spec and print the plan; run nothing")
    r.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    r.set_defaults(func=cmd_grid)

    sw = sub.add_parser("sweep", help="Ray Tune over a decoder's hyperparameters; names the Pareto front",
                        epilog=_EPILOG["sweep"], formatter_class=argparse.RawDescriptionHelpFormatter)
    sw.add_argument("spec", help=f"sweep spec YAML, or a shipped spec name: {_shipped('sweeps/specs')}")
    sw.add_argument("--experiment", default=None, help="experiment name (default: the spec's `experiment`, "
                    "else sweep-SPECNAME)")
    add_store_args(sw)
    sw.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    sw.add_argument("--limit", type=int, default=None, help="at most N samples per task")
    sw.add_argument("--trials", type=int, default=None, help="number of trials of a random or optuna search")
    sw.add_argument("--workers", type=int, default=None, help="number of model workers (default: as for `ripple grid`)")
    sw.add_argument("--data-dir", default=None, help="local benchmark data (default: the spec's, $RIPPLE_DATA_DIR, hub)")
    sw.add_argument("--batch-size", type=int, default=None, metavar="N",
                    help="samples of a cell decoded together in one engine call (default: the spec's, else 1)")
    sw.add_argument("--dry-run", action="store_true", help="validate the spec and print the plan; run nothing")
    sw.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    sw.set_defaults(func=cmd_sweep)

    u = sub.add_parser("ui", help="open the MLflow UI on a grid store (localhost only)", epilog=_EPILOG["ui"],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_store_args(u)
    u.add_argument("--port", type=int, default=5000)
    u.set_defaults(func=cmd_ui)

    rp = sub.add_parser("report", help="tables, Pareto and speedup plots of an experiment (Markdown + HTML)",
                        epilog=_EPILOG["report"], formatter_class=argparse.RawDescriptionHelpFormatter)
    rp.add_argument("experiment", help="experiment name in the result store")
    add_store_args(rp)
    rp.add_argument("--out", default=None, metavar=DIR, help="report folder (default: STORE/EXPERIMENT/report)")
    rp.add_argument("--no-tracking", action="store_true", help="neither read nor log MLflow")
    rp.set_defaults(func=cmd_report)

    lb = sub.add_parser("leaderboard", help="every experiment of a store on one page: accuracy, TPF, AUP, Pareto",
                        epilog=_EPILOG["leaderboard"], formatter_class=argparse.RawDescriptionHelpFormatter)
    lb.add_argument("--store", default=None, metavar=DIR,
                    help="result store directory (default: $RIPPLE_STORE, else ./results)")
    lb.add_argument("--out", default=None, metavar=DIR, help="output folder (default: STORE/leaderboard)")
    lb.set_defaults(func=cmd_leaderboard)

    an = sub.add_parser("analyze", help="the ripple-effect analysis (RPS paper, Figure 1)",
                        epilog=_EPILOG["analyze"], formatter_class=argparse.RawDescriptionHelpFormatter)
    an.add_argument("--model", required=True, help="checkpoint directory, hub id, or embedded name (ripple-tiny)")
    an.add_argument("--task", required=True, help="task name (see `ripple tasks list`)")
    an.add_argument("--limit", type=int, default=20, help="first N test examples (default 20)")
    an.add_argument("--out", default=None, metavar=DIR, help="output folder (default: runs/analyze/MODEL-TASK)")
    an.add_argument("--gen-length", type=int, default=48)
    an.add_argument("--block-length", type=int, default=16)
    an.add_argument("--oracle", choices=("default", "reference"), default="default",
                    help="oracle tokens: the default decoder's output, or the reference completion where it fits")
    an.add_argument("--chat", action="store_true", help="wrap each prompt in the model's chat template")
    an.add_argument("--data-dir", default=None, help="local benchmark data (default: $RIPPLE_DATA_DIR, else the hub)")
    an.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16")
    an.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    an.add_argument("--batch-size", type=int, default=32, help="rows per forward when probing a block state")
    an.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    an.set_defaults(func=cmd_analyze)

    dc = sub.add_parser("decoders", help="every registered decoder: source (built-in or plugin), declared "
                        "properties, hyperparameters with defaults and ranges")
    dc.add_argument("--json", action="store_true", help="print one JSON list")
    dc.set_defaults(func=cmd_decoders)

    pr = sub.add_parser("prior", help="PC-Sampler's token-frequency prior from a task's or a file's text",
                        epilog=_EPILOG["prior"], formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("--model", required=True, help="the model whose tokenizer counts (folder, hub id or embedded name)")
    src = pr.add_mutually_exclusive_group(required=True)
    src.add_argument("--task", action="append", help="a task whose examples' text is counted (repeatable)")
    src.add_argument("--jsonl", metavar="JSONL", help="a JSON-lines file whose --field is counted")
    pr.add_argument("--field", default="question", help="the JSON-lines field (default: question, as the authors)")
    pr.add_argument("--split", default="train", help="the tasks' split (default: train)")
    pr.add_argument("--text", default="prompt", choices=("prompt", "reference", "both"),
                    help="what of each task example is counted (default: prompt, the authors' question)")
    pr.add_argument("--limit", type=int, default=None, help="the first N examples of each task or lines of the file")
    pr.add_argument("--data-dir", default=None, help="local benchmark data (default: $RIPPLE_DATA_DIR, else the hub)")
    pr.add_argument("--out", required=True, metavar=FILE, help="where to write the prior (JSON)")
    pr.set_defaults(func=cmd_prior)

    d = sub.add_parser("demo", help="every decoder on ripple-tiny's two tasks, one comparison table")
    d.add_argument("--model", default="ripple-tiny")
    d.add_argument("--limit", type=int, default=50, help="test examples per task")
    d.add_argument("--cache", default="none")
    d.set_defaults(func=cmd_demo)
    return parser


EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # 128 + the signal number, as shells report them


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lm-eval"]:  # every later argument is the harness's, --help included
        args = argparse.Namespace(command="lm-eval", func=lambda a: cmd_lm_eval(argv[1:]))
    else:
        args = parser.parse_args(argv)
    import logging
    import signal

    warnings = logging.StreamHandler(sys.stderr)  # the store's warnings (a quarantined file), one line each
    warnings.setFormatter(logging.Formatter("ripple: warning: %(message)s"))
    warnings.setLevel(logging.WARNING)
    logger = logging.getLogger("ripple")
    logger.addHandler(warnings)
    previous = signal.getsignal(signal.SIGTERM)
    stop_on_sigterm(fresh=True)
    try:
        if args.command != "lm-eval":  # the harness checks its own paths
            check_paths(parser, args)  # before any work: a bad output path never costs a model load
        return int(args.func(args) or 0)
    except RippleError as exc:
        print(f"ripple {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        terminated = was_terminated(exc)
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        resume = "; what was stored is kept, and a re-run resumes" if args.command in ("grid", "sweep") else ""
        print(f"ripple {args.command}: {how}{resume}", file=sys.stderr)
        return EXIT_SIGTERM if terminated else EXIT_SIGINT
    finally:
        logger.removeHandler(warnings)
        if previous is not None and signal.getsignal(signal.SIGTERM) is not previous:
            signal.signal(signal.SIGTERM, previous)  # called in-process (tests): give the caller its handler back


if __name__ == "__main__":
    sys.exit(main())
