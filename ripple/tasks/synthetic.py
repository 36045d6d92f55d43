"""Deterministic, disjoint train/dev/test splits for procedurally generated tasks.

A tiny model is trained on `train` and measured on `test`, so no test prompt may
ever appear in train. The split of a problem is therefore a hash of its prompt
text alone: the same text lands in the same split whatever the seed or index
that produced it. The seed only chooses which problems are drawn and in what order.
`dev` holds half of the held-out prompts (by a second hash), so decoder settings can
be chosen (`ripple sweep ... split: dev`) on problems the test numbers never use.
"""

from __future__ import annotations

import hashlib
import random
import threading
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import count, islice
from typing import ClassVar

from ripple.errors import RippleError
from ripple.tasks.base import Example, Task

SPLITS = ("train", "dev", "test")
TEST_PERCENT = 10  # share of the problem space, by prompt hash, held out (half dev, half test)
_MAX_TRAIN_ATTEMPTS = 1000  # draws per train index before giving up (expected: 1.1)
_MAX_TEST_DRAWS_PER_EXAMPLE = 1000  # test draws per distinct test example before giving up


def split_of(salt: str, prompt: str) -> str:
    """The split a prompt belongs to: a pure function of the text."""
    digest = int.from_bytes(hashlib.blake2b(f"{salt}\0{prompt}".encode(), digest_size=8).digest(), "big")
    if digest % 100 >= TEST_PERCENT:
        return "train"
    return "dev" if (digest >> 32) % 2 else "test"


class SyntheticTask(Task):
    """A generated task: subclasses draw one problem with `make`; this class splits and indexes.

    `train` is an unbounded stream with O(1) random access (`example("train", i)`),
    so training can read example i at step i; repeats are allowed. `dev` and `test`
    are deduplicated by prompt text and cached, so accuracy counts distinct problems.
    """

    test_size: ClassVar[int] = 1000  # `examples("test")` (or "dev") without a limit

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._held = {split: _HeldOut() for split in SPLITS if split != "train"}
        self._lock = threading.Lock()

    @abstractmethod
    def make(self, rng: random.Random) -> Example:
        """Draw one problem from `rng`; its `id` is assigned by the caller."""

    def _draw(self, key: str) -> Example:
        # A string seed is hashed with SHA-512 by `random`, so draws do not depend on PYTHONHASHSEED.
        return self.make(random.Random(f"{self.name}:{self.seed}:{key}"))

    def example(self, split: str, index: int) -> Example:
        """Example `index` of `split`; the same for a given seed on every call and host."""
        _check_split(split)
        if index < 0:
            raise RippleError(f"example index must be >= 0, got {index}")
        if split == "train":
            for attempt in range(_MAX_TRAIN_ATTEMPTS):
                ex = self._draw(f"train:{index}:{attempt}")
                if split_of(self.name, ex.prompt) == "train":
                    return replace(ex, id=f"{self.name}-s{self.seed}-train-{index}")
            raise RippleError(f"{self.name}: no train problem after {_MAX_TRAIN_ATTEMPTS} draws")
        with self._lock:
            self._grow(split, index + 1)
            return self._held[split].examples[index]

    def _grow(self, split: str, size: int) -> None:
        held = self._held[split]
        budget = _MAX_TEST_DRAWS_PER_EXAMPLE * size
        while len(held.examples) < size:
            if held.draws >= budget:
                raise RippleError(f"{self.name}: only {len(held.examples)} distinct {split} problems found")
            ex = self._draw(f"{split}:{held.draws}")
            held.draws += 1
            if split_of(self.name, ex.prompt) == split and ex.prompt not in held.prompts:
                held.prompts.add(ex.prompt)
                held.examples.append(replace(ex, id=f"{self.name}-s{self.seed}-{split}-{len(held.examples)}"))

    def iter_examples(self, split: str, start: int = 0) -> Iterator[Example]:
        """Examples `start`, `start + 1`, ... of `split`, for streaming to a trainer."""
        _check_split(split)
        return (self.example(split, i) for i in count(start))

    def examples(self, split: str = "test", limit: int | None = None) -> list[Example]:
        _check_split(split)
        if limit is None:
            if split == "train":
                raise RippleError(f"{self.name}: the train split is unbounded; pass a limit or use iter_examples")
            limit = self.test_size
        return list(islice(self.iter_examples(split), limit))


@dataclass
class _HeldOut:
    """The distinct problems of one held-out split found so far, in draw order."""

    examples: list[Example] = field(default_factory=list)
    prompts: set[str] = field(default_factory=set)
    draws: int = 0


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise RippleError(f"unknown split {split!r}; expected one of: {', '.join(SPLITS)}")
