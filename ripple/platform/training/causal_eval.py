"""How well a causal LM trained by `train-tiny` (ripple-tiny-ar) knows its tasks' answers: what its card reports.

For the first `limit` problems of each task's held-out split, with the prompt as the model saw it in
training (no special tokens):
- next-token accuracy: teacher-forced top-1 over the answer's tokens and its EOS (the verifier's view:
  APD reads these rows for a draft);
- exact: greedy left-to-right decoding, one token per forward on a KV cache, until EOS or `max_new`
  tokens; the ids written equal the reference answer's ids, EOS included;
- correct: the task's own metric on that completion (decoded, cut at the task's stop sequences), the
  number a decoder's run of the task would report.

    python -m ripple.platform.training.causal_eval --model runs/ripple-tiny-ar --limit 200 [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass

import torch

from ...errors import RippleError

TASKS = ("arith", "pyfunc", "freefunc")


@dataclass(frozen=True)
class TaskReport:
    task: str
    split: str
    problems: int
    next_token_accuracy: float  # teacher-forced top-1 over answer tokens + EOS
    exact: float  # share of greedy completions equal to the reference, token for token, EOS included
    correct: float  # share the task's metric accepts
    tokens: int  # answer tokens + EOS scored by next_token_accuracy


@torch.no_grad()
def greedy(loaded, prompt: list[int], max_new: int) -> list[int]:
    """Greedy decoding of a causal LM from `prompt`: the ids it writes, ending with the first EOS (if any)."""
    from ..runtime.causal import causal_forward

    eos = set(loaded.eos_ids)
    out = causal_forward(loaded, torch.tensor([prompt]))
    written: list[int] = []
    while len(written) < max_new:
        token = int(out.logits[0, -1].argmax())
        written.append(token)
        if token in eos:
            break
        out = causal_forward(loaded, torch.tensor([[token]]), past=out.kv)
    return written


@torch.no_grad()
def evaluate_task(loaded, task_name: str, limit: int, split: str = "test", max_new: int = 48) -> TaskReport:
    """One task's next-token accuracy, exact-answer share and metric share on its first `limit` problems."""
    from ...tasks import get_task
    from ...tasks.base import cut_at_stops
    from ..runtime.causal import next_token_logits

    task = get_task(task_name)
    tok = loaded.tokenizer
    eos = loaded.eos_ids[0]
    hits = scored = exact = correct = 0
    examples = task.examples(split, limit)
    for ex in examples:
        prompt = tok(ex.prompt, add_special_tokens=False)["input_ids"]
        answer = tok(ex.reference, add_special_tokens=False)["input_ids"] + [eos]
        seq = torch.tensor([prompt + answer])  # [1, P + A]
        rows = next_token_logits(loaded, seq)[0, len(prompt) - 1:-1]  # [A, V]: the rows predicting the answer
        hits += int((rows.argmax(-1) == seq[0, len(prompt):]).sum())
        scored += len(answer)
        written = greedy(loaded, prompt, max_new)
        exact += written == answer
        text = cut_at_stops(tok.decode(written, skip_special_tokens=True), tuple(task.stop_sequences))
        correct += task.score(ex, text).correct
    n = len(examples)
    return TaskReport(task=task_name, split=split, problems=n, next_token_accuracy=hits / max(1, scored),
                      exact=exact / max(1, n), correct=correct / max(1, n), tokens=scored)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ripple.platform.training.causal_eval", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a causal LM: folder, hub id or embedded name")
    ap.add_argument("--limit", type=int, default=200, help="problems per task (default 200)")
    ap.add_argument("--split", default="test", help="held-out split (default test)")
    ap.add_argument("--task", action="append", default=None, help=f"a task (repeatable; default {', '.join(TASKS)})")
    ap.add_argument("--out", default=None, help="also write the reports as JSON here")
    args = ap.parse_args(argv)
    try:
        if args.limit <= 0:
            raise RippleError(f"--limit must be positive, got {args.limit}")
        from ..runtime.loading import load_causal

        torch.set_num_threads(1)
        loaded = load_causal(args.model, dtype="float32", device="cpu")
        t0 = time.perf_counter()
        reports = [evaluate_task(loaded, t, args.limit, args.split) for t in (args.task or TASKS)]
    except RippleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in reports:
        print(f"{r.task:9s} {r.problems} problems: next-token {100 * r.next_token_accuracy:.1f} % of {r.tokens} tokens, "
              f"exact {100 * r.exact:.1f} %, correct {100 * r.correct:.1f} %")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": args.model, "seconds": round(time.perf_counter() - t0, 1),
                       "reports": [asdict(r) for r in reports]}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
