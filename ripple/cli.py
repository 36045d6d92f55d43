"""The `ripple` command: a shell over the Python API (ripple/api.py; DESIGN.md section 9): each
command parses its arguments, calls the API and prints. The parser is built per command, one small
function each, and importing this module (or printing help, or refusing an argument) loads neither
torch nor Ray. Bad input prints one line naming the problem and exits 2; output paths are checked
before any work starts."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from .errors import RippleError, stop_on_sigterm, was_terminated
from .paths import DIR, FILE, writable_path  # noqa: F401  (FILE and DIR mark the output path options)

EXIT_USAGE = 2
EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # 128 + the signal number, as shells report them
MODEL_HELP = "checkpoint directory, hub id, or embedded name (ripple-tiny)"


def _shipped(folder: str) -> str:
    """The shipped specs in a package folder, for --help; globbed here because importing the
    spec modules would load torch for every command."""
    return ", ".join(sorted(p.stem for p in (Path(__file__).parent / folder).glob("*.yaml")))


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
  ripple train-tiny --family llada2 --out runs/ripple-tiny-bd --threads 1   # ripple-tiny-bd's recipe
  ripple train-tiny --preset tiny-ar --out runs/ripple-tiny-ar --threads 1  # ripple-tiny-ar (a causal verifier)""",
    "generate": """examples:
  ripple generate --model ../shared/golden/llada-tiny --input-ids 5,6,7 --decoder confidence --set tau=0.9 \\
      --gen-length 32 --block-length 8 --cache prefix --json
  ripple generate --model GSAI-ML/LLaDA-8B-Instruct --prompt "What is 7*8?" --chat --decoder default \\
      --gen-length 256 --block-length 32 --dtype bfloat16 --device cuda
  ripple generate --model ../shared/golden/diffusion-gemma-tiny --input-ids 5,6,7 --decoder renoise \\
      --set steps=8 --gen-length 16 --block-length 8 --seed 3 --trace /tmp/renoise.jsonl   # a uniform-noise model""",
    "trace": """examples:
  ripple trace lines --task lines/replace_random --sample 11 --decoders default,rps  # after `ripple grid lines`
  ripple trace field --store results --task freefunc --sample 3                  # every decoder of the task
  ripple trace --file /tmp/rps.jsonl --model ripple-tiny-lines   # a `ripple generate --trace` file""",
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
    "learn": """examples:
  ripple learn label --model ripple-tiny --task arith --limit 200 --out runs/arith-labels.parquet
  ripple learn train --data runs/arith-labels.parquet --out runs/arith-filter --epochs 3000 --seed 0
  ripple generate --model ripple-tiny --prompt "12+7=" --decoder learn2pd --set filter=runs/arith-filter
  ray job submit --working-dir . -- ripple learn label --model ripple-tiny --task arith --out ~/labels.parquet""",
    "prior": """examples:
  ripple prior --model ripple-tiny --task arith --task pyfunc --task freefunc --text both --limit 2000 \\
      --out priors/ripple-tiny.json
  ripple prior --model GSAI-ML/LLaDA-8B-Instruct --jsonl data/gsm8k.jsonl --field question --out priors/llada.json
  ripple generate --model ripple-tiny --prompt "12+7=" --decoder pc_sampler --set prior=priors/ripple-tiny.json \\
      --gen-length 48 --block-length 16""",
}


# ---------------------------------------------------------------------------- command-line syntax
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


def _command(sub, name: str, help: str, epilog: bool = True, **kwargs) -> argparse.ArgumentParser:
    """A subcommand's parser, with its examples as epilog."""
    if epilog:
        kwargs.update(epilog=_EPILOG[name], formatter_class=argparse.RawDescriptionHelpFormatter)
    return sub.add_parser(name, help=help, **kwargs)


def add_store_args(p: argparse.ArgumentParser) -> None:
    """--store and --tracking-uri, resolved alike by grid, sweep, report and ui."""
    p.add_argument("--store", default=None, metavar=DIR,
                   help="result store directory (default: $RIPPLE_STORE, else ./results; "
                   "~/ripple-results inside a submitted Ray job)")
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///STORE/mlflow.db)")


def add_decode_args(p: argparse.ArgumentParser) -> None:
    """The decoder, its settings and the run's shape, as generate and eval take them."""
    # the default is the API's (ripple/decoders/registry.py DEFAULT_DECODER, default_decoder); named here
    # without importing the decoders, whose modules cost every command's start-up (a test keeps the two equal)
    p.add_argument("--decoder", default=None, help="a registered decoder (`ripple decoders` lists them with their "
                   "hyperparameters; default: rps, or the family's own where RPS cannot decode it: renoise on a "
                   "uniform-noise family)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="decoder hyperparameter, repeatable (e.g. --set tau=0.9)")
    p.add_argument("--gen-length", type=int, default=None, help="response positions (default: the task's own for "
                   "eval, e.g. 32 for ParallelBench's waiting line; else the model's generation_config.json, else 48)")
    p.add_argument("--block-length", type=int, default=None, help="positions per block (default: the response "
                   "for a task with its own length; else the model's generation_config.json, else 16)")
    p.add_argument("--cache", default=None, help="KV cache policy: none, prefix, dual, sliding (apd's window) "
                   "(default: the decoder's: none for mask decoders, sliding for apd, prefix for renoise)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of each sample's random generator (decoders that draw: renoise, topk's rank=random, apd at "
                        "temperature > 0); "
                        "default 0. "
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


def decode_kwargs(args: argparse.Namespace) -> dict:
    """The API's keyword arguments of add_decode_args's options (the --set pairs as settings)."""
    return {"gen_length": args.gen_length, "block_length": args.block_length, "cache": args.cache, "seed": args.seed,
            "dtype": args.dtype, "device": args.device, "stop_at_eos": args.stop_at_eos,
            "eos_early_stop": args.eos_early_stop, "block_align": args.block_align,
            "sub_block_length": args.sub_block_length, **parse_settings(args.set)}


# ---------------------------------------------------------------------------- generate, eval
def generate_parser(sub) -> None:
    g = _command(sub, "generate", "decode one prompt with one decoder")
    g.add_argument("--model", required=True, help=MODEL_HELP)
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text (needs a tokenizer)")
    src.add_argument("--input-ids", help="comma-separated prompt token ids")
    g.add_argument("--chat", action="store_true", help="wrap --prompt in the model's chat template")
    add_decode_args(g)
    g.add_argument("--trace", metavar=FILE, help="write the decode trace as JSON lines")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    from .api import generate

    prompt = args.prompt if args.input_ids is None else parse_ids(args.input_ids)
    out = generate(args.model, prompt, args.decoder, chat=args.chat, trace=bool(args.trace), **decode_kwargs(args))
    if args.trace:
        Path(args.trace).write_text("".join(json.dumps(e) + "\n" for e in out.trace))
    if args.json:
        print(json.dumps(out.to_dict()))
        return 0
    print(out.text if out.text is not None else " ".join(map(str, out.tokens)))
    print(f"-- nfe {out.nfe}" + (f" ({out.encoder_nfe} encoder passes)" if out.encoder_nfe else "")
          + (f" (the followed decoder's: {out.reference_nfe}, not counted)" if out.reference_nfe is not None else "")
          + (f" | verifier NFE {out.verifier_nfe} (a second model's forwards, apart)" if out.verifier_nfe is not None
             else "")
          + f" | generated {out.generated_tokens} tokens in {out.decode_seconds:.3f}s | "
          f"TPS {out.tps:.1f} (canvas TPS {out.canvas_tps:.1f})" + (f" | {out.edits} edits" if out.edits else ""),
          file=sys.stderr)
    return 0


def eval_parser(sub) -> None:
    e = _command(sub, "eval", "evaluate one cell: model x task x decoder")
    e.add_argument("--model", required=True, help=MODEL_HELP)
    e.add_argument("--task", required=True, help="task name (see `ripple tasks list`)")
    add_decode_args(e)
    e.add_argument("--limit", type=int, default=None, help="evaluate the first N test examples")
    e.add_argument("--data-dir", default=None, help="local benchmark data laid out like ../shared/data "
                   "(default: $RIPPLE_DATA_DIR, else the Hugging Face hub)")
    e.add_argument("--chat", nargs="?", const="multiturn", default=None, choices=("multiturn", "singleturn"),
                   help="wrap each prompt in the model's chat template as lm-eval 0.4.13's --apply_chat_template "
                        "does: multiturn (default: each few-shot example its own turn) or singleturn "
                        "(--fewshot_as_multiturn false: the whole prompt as one user turn)")
    e.add_argument("--samples-out", metavar=FILE, help="also write one JSON line per sample")
    e.add_argument("--traces", action="store_true", help="keep each sample's decode trace (its --samples-out line's "
                   "`trace`: every forward's commits with their probabilities)")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from .api import evaluate
    from .platform.experiments.metrics import strict_text

    sink = open(args.samples_out, "w") if args.samples_out else None
    try:
        write = (lambda r: (sink.write(json.dumps(r.__dict__) + "\n"), sink.flush())) if sink else None
        result = evaluate(args.model, args.task, args.decoder, limit=args.limit, data_dir=args.data_dir,
                          chat=args.chat or False, progress=not args.json, on_sample=write, traces=args.traces,
                          **decode_kwargs(args))
    finally:
        if sink:
            sink.close()
    if args.json:
        print(json.dumps(result.summary))
        return 0
    m = result.metrics
    print(f"{result.task} | {result.decoder} {result.params} | cache {result.cache} | n {result.n}")
    tpf = "-" if m.tpf is None else f"{m.tpf:.2f}"
    print(f"accuracy {m.accuracy_text()} % (95 % Wilson interval {m.accuracy_lo:.1f} to {m.accuracy_hi:.1f}) | "
          f"mean NFE {m.mean_nfe:.2f} | TPF {tpf} | TPS {m.tps:.1f} (canvas TPS {m.canvas_tps:.1f})"
          + ("" if m.mean_verifier_nfe is None else f" | verifier NFE {m.mean_verifier_nfe:.2f} (apart)")
          + ("" if m.mean_edits is None else f" | edits/sample {m.mean_edits:.2f}"))
    if m.strict is not None:  # ParallelBench's second figure: the same rule on strictly formatted answers
        print(f"strict {strict_text(m.strict)} % (ParallelBench's score_strict: the same rule on a strictly formatted "
              "answer)")
    return 0


# ---------------------------------------------------------------------------- lm-eval
def lm_eval_parser(sub) -> None:
    le = _command(sub, "lm-eval", "lm-evaluation-harness with Ripple's decoders (--model ripple)", add_help=False)
    le.add_argument("harness_args", nargs=argparse.REMAINDER, help="lm_eval's own arguments")
    le.set_defaults(func=lambda args: cmd_lm_eval(args.harness_args))


def _option(argv: Sequence[str], name: str) -> str | None:
    """The value of `name` in an argument list (`name value` or `name=value`), or None."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.partition("=")[2]
    return None


def _take_data_dir(argv: list[str]) -> str | None:
    """Remove Ripple's --data-dir (anywhere in the line) from the harness's arguments; its value."""
    for i, arg in enumerate(argv):
        if arg == "--data-dir" or arg.startswith("--data-dir="):
            data_dir = arg.partition("=")[2] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            del argv[i: i + (1 if "=" in arg else 2)]
            if not data_dir:
                raise RippleError("--data-dir needs a directory laid out like ../shared/data")
            return data_dir
    return None


def cmd_lm_eval(argv: Sequence[str]) -> int:
    """lm-evaluation-harness's CLI with `--model ripple` available (module harness.py says why a wrapper)."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise RippleError("lm-evaluation-harness is not installed; pip install 'ripple-dllm[lmeval]' "
                          "(make test installs it)") from None
    from .platform.experiments.harness import MODEL_NAME, RippleLM, check_model_args, task_configs

    argv = list(argv)
    if _option(argv, "--model") == MODEL_NAME and isinstance(_option(argv, "--model_args"), str):
        from lm_eval.utils import simple_parse_args_string

        check_model_args(**simple_parse_args_string(_option(argv, "--model_args")))  # before the harness's slow start
    data_dir = _take_data_dir(argv)
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


# ---------------------------------------------------------------------------- tasks, decoders
def tasks_parser(sub) -> None:
    k = _command(sub, "tasks", "list tasks, or check a benchmark's scoring on its reference solutions")
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


def cmd_tasks_list(args: argparse.Namespace) -> int:
    from .tasks.base import catalogue

    found = catalogue()
    if args.json:
        print(json.dumps(found))
        return 0
    width = max(len(r["task"]) for r in found)
    rows = [r for r in found if "refused" not in r]
    metric_width = max(len(r["metric"]) for r in rows)
    for r in rows:
        print(f"{r['task']:<{width}}  {r['metric']:<{metric_width}} {r['provider']:<10} {r['source']}")
    for b in (r for r in found if "refused" in r):
        print(f"{b['task']:<{width}}  REFUSED ({b['provider']}): {b['refused']}")
    return 0


def cmd_tasks_verify(args: argparse.Namespace) -> int:
    from .tasks import get_task
    from .tasks.verify import verify_task

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


def decoders_parser(sub) -> None:
    dc = _command(sub, "decoders", "every registered decoder: source (built-in or plugin), declared properties, "
                  "hyperparameters with defaults and ranges", epilog=False)
    dc.add_argument("--json", action="store_true", help="print one JSON list")
    dc.set_defaults(func=cmd_decoders)


def cmd_decoders(args: argparse.Namespace) -> int:
    """Every registered decoder: where it comes from, what it declares, its hyperparameters."""
    from .decoders.registry import catalogue

    found = catalogue()
    if args.json:
        print(json.dumps(found))
        return 0
    for b in (r for r in found if "refused" in r):
        print(f"{b['decoder']}  ({b['provider']}; REFUSED: {b['refused']})")
    for r in (r for r in found if "refused" not in r):
        declared = [k for k, v in r["properties"].items() if v is True]
        caches = ",".join(r["properties"]["supported_caches"])
        print(f"{r['decoder']}  ({r['provider']}; caches {caches}{'; ' + ', '.join(declared) if declared else ''})")
        for h in r["hyperparameters"]:
            print(f"    {h['name']} = {h['default']!r}  ({h['accepted']})")
    return 0


# ---------------------------------------------------------------------------- train-tiny, prior
def train_tiny_parser(sub) -> None:
    t = _command(sub, "train-tiny", "train an embedded model (ripple-tiny, ripple-tiny-bd, ripple-tiny-ar) on CPU")
    t.add_argument("--out", required=True, metavar=DIR, help="output directory (Hugging Face format; resumable)")
    t.add_argument("--steps", type=int, default=None)
    t.add_argument("--batch-size", type=int, default=None)
    t.add_argument("--lr", type=float, default=None)
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--family", default=None, help="llada (ripple-tiny, the default), llada2 (ripple-tiny-bd: "
                   "block diffusion, MoE, mask and edit objectives) or qwen2 (ripple-tiny-ar: a causal LM)")
    t.add_argument("--preset", default=None, help="recipe: tiny / tiny-bd / tiny-ar / tiny-lines (the shipped models; "
                   "the first three the default of their family) or micro / micro-bd / micro-ar (tests)")
    t.add_argument("--mix", default=None, metavar="A,B,C", help="examples of arith,pyfunc,freefunc per cycle of the "
                   "data stream")
    t.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    t.add_argument("--no-resume", action="store_true", help="start over even if a checkpoint exists")
    t.add_argument("--stop-at", type=int, default=None, metavar="STEP", help="stop after STEP with its checkpoint "
                   "written (same schedule as the full run): re-run a prefix and compare training/snapshots.jsonl")
    t.set_defaults(func=cmd_train_tiny)


def cmd_train_tiny(args: argparse.Namespace) -> int:
    from .platform.training.train import train_tiny

    mix = None
    if args.mix is not None:
        try:
            mix = tuple(int(x) for x in args.mix.split(","))
        except ValueError:
            raise RippleError(f"--mix takes comma-separated positive integers, got {args.mix!r}") from None
    summary = train_tiny(args.out, family=args.family, preset=args.preset, threads=args.threads,
                         resume=not args.no_resume, stop_at=args.stop_at, steps=args.steps, batch_size=args.batch_size,
                         lr=args.lr, seed=args.seed, mix=mix)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}))
    return 0


def prior_parser(sub) -> None:
    pr = _command(sub, "prior", "PC-Sampler's token-frequency prior from a task's or a file's text")
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


def cmd_prior(args: argparse.Namespace) -> int:
    """PC-Sampler's token-frequency prior: every token of the texts, counted with the model's tokenizer."""
    from .platform.experiments.prior import build_prior

    prior, texts = build_prior(args.model, tasks=args.task, jsonl=args.jsonl, field=args.field, split=args.split,
                               text=args.text, limit=args.limit, data_dir=args.data_dir)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(prior, indent=1) + "\n")
    print(f"{out}: {prior['num_token']} tokens of {texts} texts, {len(prior['p_baseline_dict'])} distinct ids "
          f"of {prior['vocab_size']}")
    return 0


# ---------------------------------------------------------------------------- learn
def learn_parser(sub) -> None:
    lp = _command(sub, "learn", "learn a decoder's filter from the oracle: label records, then train (Learn2PD)")
    lsub = lp.add_subparsers(dest="learn_command", parser_class=_Parser, metavar="STEP")
    lsub.required = True
    la = lsub.add_parser("label", help="Learn2PD's training records: per forward of the labelling run, the block's "
                         "confidences and which positions already hold the answer (Ray workers, resumable)")
    la.add_argument("--model", required=True, help=MODEL_HELP)
    la.add_argument("--task", required=True, help="a registered task (`ripple tasks` lists them), or a comma list "
                    "(arith,pyfunc,freefunc): --limit prompts of each, pooled into one file in that order")
    la.add_argument("--split", default="train", help="the task's split (default: train)")
    la.add_argument("--limit", type=int, default=None, help="the first N examples of the split (default: all)")
    la.add_argument("--gen-length", type=int, default=48, help="response positions (default 48)")
    la.add_argument("--block-length", type=int, default=16, help="positions per block; the filter's width (default 16)")
    la.add_argument("--steps", type=int, default=None, help="forwards of the plain run that gives the answer, in all "
                    "(default: gen_length, one token per forward)")
    la.add_argument("--dtype", default="auto",
                    help="auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16, float16")
    la.add_argument("--data-dir", default=None, help="local benchmark data (default: $RIPPLE_DATA_DIR, else the hub)")
    la.add_argument("--out", required=True, metavar=FILE, help="the Parquet file of records (sample_id, block, step, "
                    "confidence, is_correct)")
    add_store_args(la)
    la.add_argument("--experiment", default=None, help="the store's experiment the labelled samples are kept in "
                    "(default: learn-label); a re-run skips the samples already there")
    la.add_argument("--workers", type=int, default=None, help="number of workers (default: one per GPU, else per CPU)")
    la.add_argument("--fresh", action="store_true", help="forget the stored samples of this experiment and relabel")
    la.set_defaults(func=cmd_learn_label)
    lt = lsub.add_parser("train", help="train a filter on labelled records; writes it (safetensors + card), its "
                         "learning curve and held-out metrics")
    lt.add_argument("--data", required=True, help="the Parquet file `ripple learn label` wrote")
    lt.add_argument("--out", required=True, metavar=DIR, help="output directory: model.safetensors, card.json, "
                    "learning_curve.png, curve.csv")
    lt.add_argument("--recipe", default="learn2pd", help="the training recipe: learn2pd (default, Learn2PD's notebook) or ripple "
                    "(Ripple's width-free filter over margin, entropy, neighbours..., chosen by held-out precision)")
    lt.add_argument("--epochs", type=int, default=None, help="full-batch steps (default: the recipe's; learn2pd 3000, ripple 1500 "
                    "per candidate)")
    lt.add_argument("--seed", type=int, default=0, help="seed of the shuffle (Python's random) and of the "
                    "initialisation (torch.manual_seed); default 0")
    lt.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: the reference's, and "
                    "bit-for-bit repeatable)")
    lt.add_argument("--json", action="store_true", help="print the card as one JSON object")
    lt.set_defaults(func=cmd_learn_train)


def cmd_learn_label(args: argparse.Namespace) -> int:
    from .api import learn_label

    done = learn_label(args.model, args.task, args.out, split=args.split, limit=args.limit, gen_length=args.gen_length,
                       block_length=args.block_length, steps=args.steps, dtype=args.dtype, data_dir=args.data_dir,
                       store=args.store, experiment=args.experiment, workers=args.workers, fresh=args.fresh,
                       progress=True)
    print(f"{done.out}: {done.records} records of {done.prompts} prompts ({done.meta['task']} {done.meta['split']}, "
          f"gen_length {done.meta['gen_length']}, block_length {done.meta['block_length']}, steps "
          f"{done.meta['steps']}); {done.computed} labelled now, {done.prompts - done.computed} already stored")
    return 0


def cmd_learn_train(args: argparse.Namespace) -> int:
    from .api import learn_train

    done = learn_train(args.data, args.out, recipe=args.recipe, epochs=args.epochs, seed=args.seed,
                       threads=args.threads, progress=not args.json)
    if args.json:
        print(json.dumps({**json.loads(done.card.to_json()), "out": str(done.out)}))
        return 0
    print(done.summary())
    return 0


# ---------------------------------------------------------------------------- grid, sweep, demo
def grid_parser(sub) -> None:
    r = _command(sub, "grid", "run a grid spec on Ray workers into the result store and MLflow")
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


def cmd_grid(args: argparse.Namespace) -> int:
    from .api import check_workers, grid, grid_spec
    from .platform.experiments.grid import format_table, summary_json

    spec = grid_spec(args.spec, limit=args.limit, data_dir=args.data_dir, batch_size=args.batch_size)
    check_workers(args.workers)  # before a dry run too
    if args.dry_run:
        print(summary_json(spec) if args.json else spec.describe())
        return 0
    run = grid(spec, store=args.store, experiment=args.experiment, tracking_uri=args.tracking_uri,
               track=not args.no_tracking, fresh=args.fresh, progress=not args.json, workers=args.workers)
    print(summary_json(spec, run) if args.json else format_table(run))
    return 0


def sweep_parser(sub) -> None:
    sw = _command(sub, "sweep", "Ray Tune over a decoder's hyperparameters; names the Pareto front")
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


def cmd_sweep(args: argparse.Namespace) -> int:
    from .api import check_workers, sweep, sweep_spec
    from .sweeps.run import format_table, summary_json

    spec = sweep_spec(args.spec, experiment=args.experiment, limit=args.limit, trials=args.trials,
                      data_dir=args.data_dir, batch_size=args.batch_size)
    check_workers(args.workers)  # before a dry run too
    if args.dry_run:
        print(spec.describe())
        return 0
    run = sweep(spec, store=args.store, tracking_uri=args.tracking_uri, track=not args.no_tracking,
                progress=not args.json, workers=args.workers)
    print(summary_json(run) if args.json else format_table(run))
    return 0


def demo_parser(sub) -> None:
    d = _command(sub, "demo", "every decoder on ripple-tiny's two tasks, one comparison table", epilog=False)
    d.add_argument("--model", default="ripple-tiny")
    d.add_argument("--limit", type=int, default=50, help="test examples per task")
    d.add_argument("--cache", default="none")
    d.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """The demo grid through the grid path (one table), then the leaderboard of the store (every
    experiment in it) and its path: grid then leaderboard, as `make demo` runs them."""
    from .api import grid, leaderboard
    from .dashboards.leaderboard import summary_line
    from .platform.experiments.demo import demo_spec
    from .platform.experiments.grid import format_table

    run = grid(demo_spec(args.model, args.limit, args.cache), fresh=True, progress=True)
    print(format_table(run))
    print(summary_line(leaderboard(run.store.root)))
    return 0


# ---------------------------------------------------------------------------- ui, report, leaderboard, analyze
def ui_parser(sub) -> None:
    u = _command(sub, "ui", "open the MLflow UI on a grid store (localhost only)")
    add_store_args(u)
    u.add_argument("--port", type=int, default=5000)
    u.set_defaults(func=cmd_ui)


def cmd_ui(args: argparse.Namespace) -> int:
    import os

    from .platform.experiments.grid import default_store
    from .platform.experiments.tracking import ui_command, ui_url

    cmd, env = ui_command(args.store or default_store(), args.tracking_uri, args.port)
    print(f"MLflow UI on {ui_url(args.port)} ({cmd[cmd.index('--backend-store-uri') + 1]}); Ctrl-C stops it",
          file=sys.stderr)
    os.execvpe(cmd[0], cmd, env)  # the server replaces this process, so stopping `ripple ui` stops it


def report_parser(sub) -> None:
    rp = _command(sub, "report", "tables, Pareto and speedup plots of an experiment (Markdown + HTML)")
    rp.add_argument("experiment", help="experiment name in the result store")
    add_store_args(rp)
    rp.add_argument("--out", default=None, metavar=DIR, help="report folder (default: STORE/EXPERIMENT/report)")
    rp.add_argument("--no-tracking", action="store_true", help="neither read nor log MLflow")
    rp.set_defaults(func=cmd_report)


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


def leaderboard_parser(sub) -> None:
    lb = _command(sub, "leaderboard", "every experiment of a store on one page: accuracy, TPF, AUP, Pareto")
    lb.add_argument("--store", default=None, metavar=DIR,
                    help="result store directory (default: $RIPPLE_STORE, else ./results)")
    lb.add_argument("--out", default=None, metavar=DIR, help="output folder (default: STORE/leaderboard)")
    lb.set_defaults(func=cmd_leaderboard)


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from .api import leaderboard
    from .dashboards.leaderboard import summary_line

    print(summary_line(leaderboard(args.store, args.out)))  # paths checked by main()
    return 0


def trace_parser(sub) -> None:
    tr = _command(sub, "trace", "one sample's decode under one or more decoders as an HTML page (forwards x positions)")
    tr.add_argument("experiment", nargs="?", default=None, help="an experiment of the store run with `traces: true`")
    tr.add_argument("--store", default=None, metavar=DIR,
                    help="result store directory (default: $RIPPLE_STORE, else ./results)")
    tr.add_argument("--task", default=None, help="the sample's task")
    tr.add_argument("--sample", default=None, help="the sample id (or its last part, e.g. 12)")
    tr.add_argument("--decoders", default=None, help="comma-separated cell labels or decoder names (default: every "
                    "decoder of the task, default first); the first is the one the others' divergence is measured from")
    tr.add_argument("--file", default=None, help="a `ripple generate --trace` file instead of a store")
    tr.add_argument("--model", default=None, help="with --file: the model whose tokenizer shows tokens as text")
    tr.add_argument("--out", default=None, metavar=FILE, help="the page (default: STORE/EXPERIMENT/traces/SAMPLE.html, "
                    "or FILE.html next to --file)")
    tr.set_defaults(func=cmd_trace)


def cmd_trace(args: argparse.Namespace) -> int:
    from .dashboards.trace_page import trace_page

    print(trace_page(args.experiment, store=args.store, task=args.task, sample=args.sample, decoders=args.decoders,
                     file=args.file, model=args.model, out=args.out))
    return 0


def analyze_parser(sub) -> None:
    an = _command(sub, "analyze", "the ripple-effect analysis (RPS paper, Figure 1)")
    an.add_argument("--model", required=True, help=MODEL_HELP)
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


# ---------------------------------------------------------------------------- the parser and main
COMMANDS = (generate_parser, eval_parser, train_tiny_parser, lm_eval_parser, tasks_parser, grid_parser, sweep_parser,
            ui_parser, report_parser, leaderboard_parser, trace_parser, analyze_parser, decoders_parser, prior_parser, learn_parser,
            demo_parser)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ripple", description="Benchmark and sweep parallel decoders of diffusion LMs.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    sub.required = True
    for add in COMMANDS:
        add(sub)
    return parser


def _warnings_to_stderr():
    """The store's warnings (a quarantined file), one line each on stderr; returns the handler to remove."""
    import logging

    warnings = logging.StreamHandler(sys.stderr)
    warnings.setFormatter(logging.Formatter("ripple: warning: %(message)s"))
    warnings.setLevel(logging.WARNING)
    logging.getLogger("ripple").addHandler(warnings)
    return warnings


def main(argv: Sequence[str] | None = None) -> int:
    import logging
    import signal

    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lm-eval"]:  # every later argument is the harness's, --help included
        args = argparse.Namespace(command="lm-eval", func=lambda a: cmd_lm_eval(argv[1:]))
    else:
        args = parser.parse_args(argv)
    warnings = _warnings_to_stderr()
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
        resumable = args.command in ("grid", "sweep") or getattr(args, "learn_command", None) == "label"
        resume = "; what was stored is kept, and a re-run resumes" if resumable else ""
        print(f"ripple {args.command}: {how}{resume}", file=sys.stderr)
        return EXIT_SIGTERM if terminated else EXIT_SIGINT
    finally:
        logging.getLogger("ripple").removeHandler(warnings)
        if previous is not None and signal.getsignal(signal.SIGTERM) is not previous:
            signal.signal(signal.SIGTERM, previous)  # called in-process (tests): give the caller its handler back


if __name__ == "__main__":
    sys.exit(main())
