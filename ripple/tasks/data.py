"""Benchmark data: from the Hugging Face hub by default, or from a local copy.

A local data directory is laid out like `../shared/data` (`gsm8k/test.jsonl`,
`math500/test.jsonl`, `humaneval/HumanEval.jsonl[.gz]`, `mbpp/mbpp.jsonl`; ParallelBench's test
files, which have no hub copy, under `parallelbench/<category>/`); it is given by `--data-dir`
or `RIPPLE_DATA_DIR` and always wins over the hub, so runs on a cluster without internet read
the same bytes as runs that download.
"""
from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ripple.errors import RippleError

DATA_DIR_ENV = "RIPPLE_DATA_DIR"
LAYOUT = ("gsm8k/test.jsonl, math500/test.jsonl, humaneval/HumanEval.jsonl, mbpp/mbpp.jsonl, "
          "parallelbench/<category>/ for ParallelBench's test files")


@dataclass(frozen=True)
class Source:
    """Where one split lives: a hub dataset (id, config, split) and its paths in a local data directory."""

    hub_id: str
    config: str | None
    split: str
    local: tuple[str, ...]  # candidates relative to the data directory; the first that exists is read


def data_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """The local data directory in effect: the explicit one, else $RIPPLE_DATA_DIR, else None (hub)."""
    chosen = explicit if explicit is not None else os.environ.get(DATA_DIR_ENV) or None
    if chosen is None:
        return None
    path = Path(chosen).expanduser()
    if not path.is_dir():
        raise RippleError(f"data directory {str(path)!r} does not exist; it must be laid out like "
                          f"../shared/data ({LAYOUT})")
    return path


def load_rows(task: str, source: Source, directory: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Every row of `source`, from the local directory when one is in effect, else from the hub."""
    local = data_dir(directory)
    if local is not None:
        for rel in source.local:
            if (local / rel).is_file():
                return read_jsonl(local / rel)
        raise RippleError(f"task {task}: none of {', '.join(source.local)} found in data directory {str(local)!r} "
                          f"(layout like ../shared/data: {LAYOUT})")
    return _from_hub(task, source)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every row of a JSON-lines file (optionally gzipped); a corrupt line or an empty file is one line."""
    opener = gzip.open if path.suffix == ".gz" else open
    rows, lineno = [], 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise ValueError("not a JSON object")
                    rows.append(row)
    except (ValueError, OSError, EOFError) as exc:
        where = f"line {lineno}" if lineno else "its start"
        raise RippleError(f"{path} is corrupt at {where}: {exc}") from None
    if not rows:
        raise RippleError(f"{path} holds no rows")
    return rows


def _from_hub(task: str, source: Source) -> list[dict[str, Any]]:
    hint = (f"pass --data-dir DIR or set {DATA_DIR_ENV} to a directory laid out like ../shared/data ({LAYOUT})")
    offline = any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
                  for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))
    import datasets

    try:
        ds = datasets.load_dataset(source.hub_id, source.config, split=source.split)
    except Exception as exc:  # network, missing cache, gated repo: all end in the same advice
        state = "the hub is offline and the dataset is not cached" if offline else f"{type(exc).__name__}: {exc}"
        raise RippleError(f"task {task}: cannot load {source.hub_id} ({source.config or 'default'}, "
                          f"{source.split}) from the Hugging Face hub ({state}); {hint}") from None
    return [dict(row) for row in ds]
