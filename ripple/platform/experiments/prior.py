"""PC-Sampler's token-frequency prior (`ripple prior`): every token of a task's or a JSON-lines file's
texts, counted with the model's tokenizer over the rows the model predicts (as it loads)."""
from __future__ import annotations

import json
from pathlib import Path

from ...decoders.pc_sampler import count_prior
from ...errors import RippleError

TEXT_FIELDS = {"prompt": ("prompt",), "reference": ("reference",), "both": ("prompt", "reference")}


def jsonl_texts(path: str, field: str, limit: int | None) -> list[str]:
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


def task_texts(tasks: list[str], split: str, text: str, limit: int | None, data_dir: str | None) -> list[str]:
    """The prompts and/or reference solutions (`text`) of the first `limit` examples of each task."""
    from ...tasks import get_task

    texts = []
    for name in tasks:
        task = get_task(name, data_dir=data_dir)
        texts += [getattr(ex, f) for ex in task.examples(split, limit) for f in TEXT_FIELDS[text]]
    return texts


def build_prior(model: str, *, tasks: list[str] | None = None, jsonl: str | None = None, field: str = "question",
                split: str = "train", text: str = "prompt", limit: int | None = None,
                data_dir: str | None = None) -> tuple[dict, int]:
    """(the prior as its JSON document, the number of texts counted) of `tasks` or of `jsonl`."""
    from ..runtime.loading import load_tokenizer, read_config, resolve_model_dir
    from ..runtime.models import get_family

    if limit is not None and limit < 1:
        raise RippleError(f"--limit must be a positive number of examples, got {limit}")
    if (tasks is None) == (jsonl is None):
        raise RippleError("a prior counts the texts of tasks or of a JSON-lines file: give one of them")
    path = resolve_model_dir(model)
    tok = load_tokenizer(path)
    if tok is None:
        raise RippleError(f"model {model!r} has no tokenizer files; a prior counts the tokenizer's ids")
    cfg = read_config(path)
    vocab = int(get_family(cfg["model_type"]).to_config(cfg).vocab_size)  # the rows the model predicts, as it loads
    if jsonl is not None:
        texts, source = jsonl_texts(jsonl, field, limit), f"{Path(jsonl).name}:{field}"
    else:
        texts, source = task_texts(tasks, split, text, limit, data_dir), f"tasks {', '.join(tasks)} ({split}, {text})"
    prior = count_prior((tok(t, add_special_tokens=False)["input_ids"] for t in texts), vocab, source)
    return prior, len(texts)
