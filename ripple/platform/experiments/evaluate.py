"""Evaluate one cell (model x task x decoder x lengths x cache): `ripple eval`.

Samples are decoded one at a time (batch 1, the setting TPS is usually reported at) and
scored as they finish; code is scored in the sandbox on a thread pool so scoring
overlaps decoding. The cell's numbers come from the metrics module, like every surface's.
"""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

from ...decoders import Scheduler, label
from ...tasks.base import cut_at_stops
from ...tasks.prompting import encode_example
from ..runtime.engine import Engine, GenerationConfig, SampleOutput
from ..runtime.loading import TASKS_NEED_A_TOKENIZER, LoadedModel
from .metrics import CellMetrics, cell_metrics


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
    edits: int = 0  # token edits (editing decoders)
    encoder_nfe: int = 0  # of nfe, encoder passes (a uniform-noise family)
    seed: int | None = None  # the sample's seed (`sample_seed`) when its decoder draws (renoise), else None
    floor_nfe: int | None = None  # the task's floor for the sample (Task.floor_nfe), where it defines one
    trace: str | None = None  # the decode trace (ripple/platform/runtime/tracing.py `Trace.dumps`) with `traces`
    reference_nfe: int | None = None  # forwards of the decoder the oracle followed (None: another decoder)
    verifier_nfe: int | None = None  # forwards of the decoder's second model (None: a decoder without one)


@dataclass(frozen=True)
class CellResult:
    samples: tuple[SampleResult, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.samples)

    @cached_property
    def stats(self) -> CellMetrics:
        """The metrics module's numbers for these samples (accuracy with its Wilson interval, TPS, ...)."""
        import polars as pl

        gen = self.settings.get("gen_length", 0)
        frame = pl.DataFrame([{"sample_id": s.sample_id, "correct": s.correct, "error": None, "nfe": s.nfe,
                               "generated_tokens": s.generated_tokens, "decode_seconds": s.decode_seconds,
                               "gen_length": gen, "edits": s.edits, "score_strict": strict_of(s.score),
                               "verifier_nfe": s.verifier_nfe}
                              for s in self.samples],
                             schema={"sample_id": pl.String, "correct": pl.Boolean, "error": pl.String, "nfe": pl.Int64,
                                     "generated_tokens": pl.Int64, "decode_seconds": pl.Float64, "gen_length": pl.Int64,
                                     "edits": pl.Int64, "score_strict": pl.Float64, "verifier_nfe": pl.Int64})
        return cell_metrics(frame)

    def __getattr__(self, name: str):  # accuracy, mean_nfe, tps, canvas_tps, decode_seconds, ...
        if name.startswith("_") or name in ("samples", "settings", "stats"):
            raise AttributeError(name)
        return getattr(self.stats, name)

    def summary(self) -> dict[str, Any]:
        return {**self.settings, **self.stats.metrics(), "n": self.n}


def strict_of(details: dict[str, Any]) -> float | None:
    """A score's strict figure (ParallelBench's `score_strict`), or None for a task without one."""
    value = details.get("score_strict")
    return None if value is None else float(value)


def sample_seed(seed: int, sample_id: str) -> int:
    """The seed of one sample's random generator in a cell run with `seed`: the first 8 bytes of
    sha256("{seed}:{sample_id}"), big-endian, as a non-negative 63-bit integer. It depends on the
    cell's seed and the sample's id only, so a sample draws the same tokens in any batch, order,
    worker or device, and `ripple eval --seed S` gives the grid's tokens."""
    digest = hashlib.sha256(f"{seed}:{sample_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def completion_text(tokenizer, out: SampleOutput, stop_sequences=()) -> str:
    """The response up to the first end-of-sequence token, cut at the first stop sequence."""
    text = tokenizer.decode(list(out.tokens[: out.generated_tokens]), skip_special_tokens=True)
    return cut_at_stops(text, tuple(stop_sequences))


def run_sample(engine: Engine, tokenizer, task, example, decoder: Scheduler, config: GenerationConfig,
               chat: bool | str = False, seed: int = 0, trace=None) -> tuple[list[int], SampleOutput, str]:
    """Decode one example: (prompt ids, engine output, completion text cut at the task's stops)."""
    return run_batch(engine, tokenizer, task, [example], decoder, config, chat=chat, seed=seed, trace=trace)[0]


def run_batch(engine: Engine, tokenizer, task, examples, decoder: Scheduler, config: GenerationConfig,
              chat: bool | str = False, seed: int = 0, trace=None) -> list[tuple[list[int], SampleOutput, str]]:
    """Decode several examples in one engine call (left-padded rows, per-row NFE): for each, as
    `run_sample`. The tokens equal those of one call per example (`ripple.bench.batch_equivalence`).
    Each example's generator is seeded with `sample_seed(seed, example.id)`. `trace`: the engine's
    trace callback (a `TraceRecorder` keeps each row's)."""
    prompts = [encode_example(tokenizer, ex, chat=chat) for ex in examples]
    outs = engine.generate(prompts, decoder, config, seeds=[sample_seed(seed, ex.id) for ex in examples], trace=trace)
    return [(ids, out, completion_text(tokenizer, out, task.stop_sequences)) for ids, out in zip(prompts, outs)]


def drawn_seed(decoder: Scheduler, seed: int, sample_id: str) -> int | None:
    """The seed a record carries for a sample: `sample_seed` when the decoder draws (a renoising
    decoder), None for the greedy mask decoders, which never use it."""
    return sample_seed(seed, sample_id) if decoder.noise == "uniform" else None


def sample_result(example, ids: list[int], out: SampleOutput, text: str, score, seed: int | None = None,
                  floor_nfe: int | None = None, trace: str | None = None) -> SampleResult:
    """The record of one decoded and scored example."""
    return SampleResult(example.id, len(ids), text, bool(score.correct), dict(score.details), out.nfe,
                        out.lookahead_nfe, out.decode_seconds, out.generated_tokens, out.tps, out.canvas_tps,
                        out.edits, out.encoder_nfe, seed, floor_nfe, trace, out.reference_nfe,
                        out.verifier_nfe)


def evaluate_cell(lm: LoadedModel, task, decoder: Scheduler, config: GenerationConfig, *,
                  limit: int | None = None, split: str = "test", progress: bool = True, chat: bool | str = False,
                  on_sample: Callable[[SampleResult], None] | None = None, seed: int = 0,
                  traces: bool = False, auxiliary: dict[str, Any] | None = None) -> CellResult:
    """Decode and score the first `limit` examples of `task`, one at a time, in order (each with its
    own seed, `sample_seed(seed, example id)`); `traces` keeps each sample's decode trace; `auxiliary`:
    the models the decoder needs beside `lm`, by reference (ripple/platform/runtime/auxiliary.py)."""
    from ..runtime.tracing import TraceRecorder

    from ...progress import progress as progress_bar

    from ...errors import RippleError

    if lm.tokenizer is None:
        raise RippleError(f"model {lm.name!r} has no tokenizer; {TASKS_NEED_A_TOKENIZER}")
    examples = task.examples(split, limit)
    engine = Engine.from_loaded(lm)
    engine.auxiliary.update(auxiliary or {})
    settings = {"model": lm.name, "task": task.name, "decoder": label(decoder), "params": decoder.params.to_dict(),
                "gen_length": config.gen_length, "block_length": config.block_length, "cache": config.cache,
                "seed": seed}
    results: list[SampleResult] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        pending = []
        bar = progress_bar(examples, disable=not progress, desc=f"{task.name}/{decoder.name}", unit="sample",
                           leave=False)
        for ex in bar:
            rec = TraceRecorder(1) if traces else None
            ids, out, text = run_sample(engine, lm.tokenizer, task, ex, decoder, config, chat=chat, seed=seed, trace=rec)
            trace = rec.traces()[0].dumps() if rec else None
            pending.append((ex, ids, out, text, trace, pool.submit(task.score, ex, text)))
        for ex, ids, out, text, trace, fut in pending:
            res = sample_result(ex, ids, out, text, fut.result(), drawn_seed(decoder, seed, ex.id), task.floor_nfe(ex),
                                trace)
            results.append(res)
            if on_sample:
                on_sample(res)
    return CellResult(tuple(results), settings)
