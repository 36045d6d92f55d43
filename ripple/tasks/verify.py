"""`ripple tasks verify`: does a benchmark's scorer accept its reference solutions and reject wrong ones?

Every reference solution is scored as if a model had written it (cut at the task's stop
sequences first, as a generation would be), and so is a deliberately wrong completion.
A correct pipeline gives 100 % and 0 %; anything else is listed with its reason.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ripple.errors import RippleError
from ripple.tasks.base import Example, Score, cut_at_stops
from ripple.tasks.benchmark import BenchmarkTask


@dataclass(frozen=True)
class Failure:
    id: str
    reason: str


@dataclass(frozen=True)
class VerifyReport:
    task: str
    n: int
    gold_accuracy: float  # percent
    wrong_accuracy: float  # percent
    gold_failures: tuple[Failure, ...]
    wrong_passes: tuple[str, ...]
    seconds: float

    def to_dict(self) -> dict:
        return {"task": self.task, "n": self.n, "gold_accuracy": self.gold_accuracy,
                "wrong_accuracy": self.wrong_accuracy,
                "gold_failures": [{"id": f.id, "reason": f.reason} for f in self.gold_failures],
                "wrong_passes": list(self.wrong_passes), "seconds": self.seconds}


def _reason(score: Score, completion: str, gold: str) -> str:
    details = score.details
    if completion != gold:
        return "the reference is cut by a stop sequence"
    for key in ("error", "strict_extracted", "parsed"):
        if details.get(key):
            return f"{key}: {details[key]}"
    return "scored wrong"


def verify_task(task: BenchmarkTask, limit: int | None = None, workers: int | None = None,
                progress: bool = True) -> VerifyReport:
    """Score every example's gold and wrong completion; code runs in the sandbox on `workers` threads."""
    from ..progress import progress as progress_bar

    if limit is not None and limit < 1:
        raise RippleError(f"--limit must be a positive number of examples, got {limit}")
    if workers is not None and workers < 1:
        raise RippleError(f"--workers must be positive, got {workers}")
    if not isinstance(task, BenchmarkTask):
        raise RippleError(f"task {task.name} has no reference solutions to verify; "
                          "verify works on gsm8k, math500, humaneval and mbpp")
    examples = task.examples("test", limit)
    start = time.perf_counter()

    def check(ex: Example) -> tuple[Example, Score, str, str, Score]:
        gold = task.gold_completion(ex)
        cut = cut_at_stops(gold, task.stop_sequences)
        return ex, task.score(ex, cut), cut, gold, task.score(ex, cut_at_stops(task.wrong_completion(ex),
                                                                              task.stop_sequences))

    failures, passes, n_gold = [], [], 0
    with ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2)) as pool:
        for ex, gold_score, cut, gold, wrong_score in progress_bar(pool.map(check, examples), total=len(examples),
                                                           disable=not progress, desc=f"verify {task.name}",
                                                           unit="example"):
            if gold_score.correct:
                n_gold += 1
            else:
                failures.append(Failure(ex.id, _reason(gold_score, cut, gold)))
            if wrong_score.correct:
                passes.append(ex.id)
    n = len(examples)
    return VerifyReport(task=task.name, n=n, gold_accuracy=100.0 * n_gold / n if n else 0.0,
                        wrong_accuracy=100.0 * len(passes) / n if n else 0.0, gold_failures=tuple(failures),
                        wrong_passes=tuple(passes), seconds=time.perf_counter() - start)
