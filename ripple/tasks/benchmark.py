"""Published benchmarks: data from `data.py`, prompts and scoring as lm-evaluation-harness does them.

Only the test split is evaluated. Each benchmark also says what its gold completion is
(the reference solution, written as a model would write it) and gives a deliberately
wrong completion, so `ripple tasks verify` can show the scorer accepts the one and
rejects the other on every example.
"""
from __future__ import annotations

import threading
from abc import abstractmethod
from typing import ClassVar

from ripple.errors import RippleError
from ripple.tasks.base import Example, Task


class BenchmarkTask(Task):
    uses_data: ClassVar[bool] = True
    hub_ids: ClassVar[tuple[str, ...]] = ()  # shown by `ripple tasks list`

    def __init__(self, data_dir: str | None = None) -> None:
        self.data_dir = data_dir
        self._examples: list[Example] | None = None
        self._lock = threading.Lock()

    def examples(self, split: str = "test", limit: int | None = None) -> list[Example]:
        if split != "test":
            raise RippleError(f"task {self.name} is evaluated on its test split only, not {split!r}")
        with self._lock:
            if self._examples is None:
                self._examples = self.build()
        return list(self._examples if limit is None else self._examples[:limit])

    @abstractmethod
    def build(self) -> list[Example]:
        """Every test example, in the dataset's order, with its full prompt."""

    def gold_completion(self, example: Example) -> str:
        """The reference solution as a completion of `example.prompt`."""
        return example.reference

    @abstractmethod
    def wrong_completion(self, example: Example) -> str:
        """A well-formed completion that must be scored wrong."""
