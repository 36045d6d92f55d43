"""Evaluate one cell (model x task x decoder x lengths x cache): `ripple eval`.

Samples are decoded one at a time (batch 1, the setting TPS is usually reported at) and
scored as they finish; code is scored in the sandbox on a thread pool so scoring
overlaps decoding. TPS of a cell is total generated tokens / total decode seconds.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from ..decoders import Scheduler
from ..tasks.base import cut_at_stops
from ..tasks.prompting import encode_prompt
from .engine import Engine, GenerationConfig, SampleOutput
from .loading import LoadedModel


@dataclass(frozen=True)
class SampleResult:
    sample_id: str
    prompt_tokens: int
    completion: str
    correct: bool
    score: dict[str, Any]
    nfe: int
    lookahead_nfe: int
    decode_seconds: float
    generated_tokens: int
    tps: float
    canvas_tps: float


@dataclass(frozen=True)
class CellResult:
    samples: tuple[SampleResult, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def accuracy(self) -> float:
        return 100.0 * sum(s.correct for s in self.samples) / self.n if self.n else 0.0

    @property
    def mean_nfe(self) -> float:
        return sum(s.nfe for s in self.samples) / self.n if self.n else 0.0

    @property
    def decode_seconds(self) -> float:
        return sum(s.decode_seconds for s in self.samples)

    @property
    def tps(self) -> float:
        secs = self.decode_seconds
        return sum(s.generated_tokens for s in self.samples) / secs if secs else 0.0

    @property
    def canvas_tps(self) -> float:
        secs = self.decode_seconds
        return self.settings.get("gen_length", 0) * self.n / secs if secs else 0.0

    def summary(self) -> dict[str, Any]:
        return {**self.settings, "n": self.n, "accuracy": self.accuracy, "mean_nfe": self.mean_nfe,
                "tps": self.tps, "canvas_tps": self.canvas_tps, "decode_seconds": self.decode_seconds}


def completion_text(tokenizer, out: SampleOutput, stop_sequences=()) -> str:
    """The response up to the first end-of-sequence token, cut at the first stop sequence."""
    text = tokenizer.decode(list(out.tokens[: out.generated_tokens]), skip_special_tokens=True)
    return cut_at_stops(text, tuple(stop_sequences))


def run_sample(engine: Engine, tokenizer, task, example, decoder: Scheduler, config: GenerationConfig,
               chat: bool = False) -> tuple[list[int], SampleOutput, str]:
    """Decode one example: (prompt ids, engine output, completion text cut at the task's stops)."""
    ids = encode_prompt(tokenizer, example.prompt, chat=chat)
    out = engine.generate([ids], decoder, config)[0]
    return ids, out, completion_text(tokenizer, out, task.stop_sequences)


def sample_result(example, ids: list[int], out: SampleOutput, text: str, score) -> SampleResult:
    """The record of one decoded and scored example."""
    return SampleResult(example.id, len(ids), text, bool(score.correct), dict(score.details), out.nfe,
                        out.lookahead_nfe, out.decode_seconds, out.generated_tokens, out.tps, out.canvas_tps)


def evaluate_cell(lm: LoadedModel, task, decoder: Scheduler, config: GenerationConfig, *,
                  limit: int | None = None, split: str = "test", progress: bool = True, chat: bool = False,
                  on_sample: Callable[[SampleResult], None] | None = None) -> CellResult:
    """Decode and score the first `limit` examples of `task`, one at a time, in order."""
    from ..progress import progress as progress_bar

    from ..errors import RippleError

    if lm.tokenizer is None:
        raise RippleError(f"model {lm.name!r} has no tokenizer; tasks need one to build prompts")
    examples = task.examples(split, limit)
    engine = Engine.from_loaded(lm)
    settings = {"model": lm.name, "task": task.name, "decoder": decoder.name, "params": decoder.params.to_dict(),
                "gen_length": config.gen_length, "block_length": config.block_length, "cache": config.cache}
    results: list[SampleResult] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        pending = []
        bar = progress_bar(examples, disable=not progress, desc=f"{task.name}/{decoder.name}", unit="sample",
                           leave=False)
        for ex in bar:
            ids, out, text = run_sample(engine, lm.tokenizer, task, ex, decoder, config, chat=chat)
            pending.append((ex, ids, out, text, pool.submit(task.score, ex, text)))
        for ex, ids, out, text, fut in pending:
            res = sample_result(ex, ids, out, text, fut.result())
            results.append(res)
            if on_sample:
                on_sample(res)
    return CellResult(tuple(results), settings)
