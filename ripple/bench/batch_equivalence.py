"""Batch equivalence: a sample decoded in a batch gets the tokens and NFE of its batch-1 run.

Why it matters: throughput mode (`batch_size` > 1) is only a timing setting if batching
changes no result, which is why batch size is not part of a cell's identity. A batch
left-pads its prompts and packs rows of different lengths and kinds (plain, lookahead,
shadow) into one forward, so the same logits come out of differently shaped matrix
products and may differ in the last bits. That can flip a decision only where two
options are tied to within that noise. So every sample is compared, and any that differs
is explained: its first diverging decision is replayed with `Engine.generate(observe=...)`
and reported with the gap between the decision's top two options in the batch-1 run
(token logits at a position that committed differently, the confidences of two positions
that swapped, or the candidate scores a lookahead decoder traced) and the largest logit
difference between the two runs' inputs to it. A gap below NEAR_TIE is a near-tie.

    python -m ripple.bench --batch-equivalence [--caches none,prefix,dual] [--batch-size 8]
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from ..decoders import build
from ..platform.runtime.engine import Engine, GenerationConfig, SampleOutput

NEAR_TIE = 1e-5  # a decision whose top two options are closer than this may flip with float noise
CACHES = ("none", "prefix", "dual")
Key = tuple[int, int, str]  # (block, step, phase) of a decision, as in trace events


@dataclass(frozen=True)
class Divergence:
    """One sample whose batched run differs from its batch-1 run, with its first diverging decision."""

    cache: str
    task: str
    decoder: str
    sample_id: str
    row: int  # its row in the batch
    nfe: tuple[int, int]  # (batch 1, batched)
    tokens_differ: bool
    decision: Key | None  # None: no diverging decision found (then nothing explains the difference)
    positions: tuple[int, ...]  # response positions committed differently at that decision
    gap: float | None  # top-2 gap of that decision in the batch-1 run (logits, probabilities or scores)
    gap_kind: str
    delta: float | None  # max |difference| between the two runs' input tensors of that decision

    @property
    def near_tie(self) -> bool:
        return self.gap is not None and self.gap < NEAR_TIE

    def describe(self) -> str:
        where = f"{self.cache} {self.task} {self.decoder} {self.sample_id} (row {self.row})"
        what = ("tokens and NFE" if self.tokens_differ and self.nfe[0] != self.nfe[1] else
                "tokens" if self.tokens_differ else "NFE") + f" differ (NFE {self.nfe[0]} vs {self.nfe[1]})"
        if self.decision is None:
            return f"{where}: {what}; no diverging decision found: UNEXPLAINED"
        blk, step, phase = self.decision
        gap = "n/a" if self.gap is None else f"{self.gap:.2e}"
        delta = "n/a" if self.delta is None else f"{self.delta:.2e}"
        verdict = "near-tie" if self.near_tie else "NOT a near-tie"
        return (f"{where}: {what}; first diverging decision block {blk} step {step} ({phase}) at positions "
                f"{list(self.positions)}: top-2 gap {gap} ({self.gap_kind}), input logits differ by at most {delta}: "
                f"{verdict}")


@dataclass
class CacheResult:
    cache: str
    samples: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def near_ties(self) -> int:
        return sum(d.near_tie for d in self.divergences)


@dataclass
class EquivalenceReport:
    model: str
    batch_size: int
    cells: int
    limit: int | None
    caches: list[CacheResult] = field(default_factory=list)
    weights: str = ""  # sha256 prefix of the checkpoint's weight files: which model this count is for

    @property
    def samples(self) -> int:
        return sum(c.samples for c in self.caches)

    @property
    def differing(self) -> int:
        return sum(len(c.divergences) for c in self.caches)

    @property
    def unexplained(self) -> int:
        return sum(len(c.divergences) - c.near_ties for c in self.caches)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "weights": self.weights, "batch_size": self.batch_size, "cells": self.cells,
                "limit": self.limit, "samples": self.samples, "differing": self.differing, "unexplained": self.unexplained,
                "caches": {c.cache: {"samples": c.samples, "differing": len(c.divergences), "near_ties": c.near_ties,
                                     "seconds": c.seconds} for c in self.caches},
                "divergences": [{**d.__dict__, "near_tie": d.near_tie} for c in self.caches for d in c.divergences]}

    def format(self) -> str:
        per_cell = "all" if self.limit is None else self.limit
        lines = [f"batch equivalence: {self.model} (weights sha256 {self.weights}), demo grid ({self.cells} "
                 f"cell{'s' if self.cells != 1 else ''}, {per_cell} samples per cell), batch {self.batch_size} vs "
                 f"batch 1, tokens and NFE of every sample",
                 f"{'cache':<8}{'samples':>9}{'differing':>11}{'near-tie':>10}{'unexplained':>13}{'seconds':>9}"]
        for c in self.caches:
            lines.append(f"{c.cache:<8}{c.samples:>9}{len(c.divergences):>11}{c.near_ties:>10}"
                         f"{len(c.divergences) - c.near_ties:>13}{c.seconds:>9.0f}")
        lines.append(f"{'total':<8}{self.samples:>9}{self.differing:>11}{self.differing - self.unexplained:>10}"
                     f"{self.unexplained:>13}")
        if self.differing:
            lines.append(f"differing samples (near-tie: the diverging decision's top two options were closer than "
                         f"{NEAR_TIE:g} in the batch-1 run):")
            lines += ["  " + d.describe() for c in self.caches for d in c.divergences]
        return "\n".join(lines)


def check(model: str = "ripple-tiny", caches: Sequence[str] = CACHES, batch_size: int = 8, limit: int | None = 50,
          decoders: Sequence[str] | None = None, tasks: Sequence[str] | None = None, progress: bool = True,
          device: str = "cpu") -> EquivalenceReport:
    """Decode every sample of the demo grid (optionally only some decoders and tasks) at batch 1 and in
    consecutive batches of `batch_size`, as a grid worker batches them, for each cache policy."""
    from ..platform.experiments.demo import demo_spec
    from ..platform.experiments.evaluate import run_batch
    from ..platform.runtime.loading import load_model, weights_digest
    from ..progress import progress as progress_bar
    from ..tasks import get_task

    lm = load_model(model, dtype="float32", device=device)
    engine = Engine.from_loaded(lm)
    report = EquivalenceReport(model, batch_size, 0, limit, weights=weights_digest(lm.path))
    task_objs: dict[str, Any] = {}
    for cache in caches:
        spec = demo_spec(model, limit or 10**9, cache)
        cells = [c for c in spec.cells if (decoders is None or c.decoder in decoders) and
                 (tasks is None or c.task in tasks)]
        report.cells = len(cells)
        result = CacheResult(cache)
        started = time.perf_counter()
        bar = progress_bar(total=len(cells), disable=not progress, desc=f"batch equivalence, cache {cache}",
                           unit="cell", leave=False)
        for cell in cells:
            task = task_objs.setdefault(cell.task, get_task(cell.task))
            examples = task.examples(cell.split, cell.limit)
            config = GenerationConfig(cell.gen_length, cell.block_length, cell.cache, cell.stop_at_eos, cell.eos_early_stop,
                                      block_align=cell.block_align, sub_block_length=cell.sub_block_length)
            params = {k: str(v) for k, v in cell.params}
            singles = [run_batch(engine, lm.tokenizer, task, [ex], build(cell.decoder, params), config,
                                 chat=cell.prompt_chat)[0] for ex in examples]
            for b0 in range(0, len(examples), batch_size):
                chunk = examples[b0:b0 + batch_size]
                batched = run_batch(engine, lm.tokenizer, task, chunk, build(cell.decoder, params), config,
                                    chat=cell.prompt_chat)
                for row, ((ids, one, _), (_, many, _)) in enumerate(zip(singles[b0:b0 + batch_size], batched)):
                    if one.tokens != many.tokens or one.nfe != many.nfe:
                        prompts = [ids_ for ids_, _, _ in singles[b0:b0 + batch_size]]
                        result.divergences.append(explain(engine, cell.decoder, params, config, prompts, row, one,
                                                          many, cache=cache, task=cell.task, sample_id=chunk[row].id))
            result.samples += len(examples)
            bar.update(1)
        bar.close()
        result.seconds = time.perf_counter() - started
        report.caches.append(result)
    return report


# ---------------------------------------------------------------------------- explaining a difference
class _Recorder:
    """Trace events and decision inputs of one row of a `generate` call, keyed by decision."""

    def __init__(self, row: int):
        self.row = row
        self.events: list[dict[str, Any]] = []
        self.inputs: dict[Key, dict[str, torch.Tensor]] = {}

    def trace(self, event: dict[str, Any]) -> None:
        if event["sample"] == self.row:
            self.events.append(event)

    def observe(self, row: int, key: Key, tensors: dict[str, torch.Tensor]) -> None:
        if row == self.row:
            self.inputs[key] = {k: v.detach().to(torch.float64).cpu().clone() for k, v in tensors.items()}


def _outcome(event: dict[str, Any]) -> tuple:
    return (tuple(map(tuple, event["committed"])), tuple(event.get("remasked", [])), event["forward"],
            event.get("chosen"))


def explain(engine: Engine, decoder: str, params: dict[str, str], config: GenerationConfig,
            prompts: list[list[int]], row: int, one: SampleOutput, many: SampleOutput, *, cache: str, task: str,
            sample_id: str) -> Divergence:
    """Replay the sample alone and in its batch with observers; report its first diverging decision."""
    alone, batched = _Recorder(0), _Recorder(row)
    engine.generate([prompts[row]], build(decoder, params), config, trace=alone.trace, observe=alone.observe)
    engine.generate(prompts, build(decoder, params), config, trace=batched.trace, observe=batched.observe)
    base = dict(cache=cache, task=task, decoder=decoder, sample_id=sample_id, row=row, nfe=(one.nfe, many.nfe),
                tokens_differ=one.tokens != many.tokens)
    thresholds = [float(v) for k, v in params.items() if k.startswith("tau")]  # commit rules' thresholds
    for a, b in zip(alone.events, batched.events):
        key = (a["block"], a["step"], a["phase"])
        if key != (b["block"], b["step"], b["phase"]) or _outcome(a) != _outcome(b):
            positions, gap, kind = decision_gap(alone.inputs.get(key), a, b, config.block_length, thresholds)
            return Divergence(**base, decision=key, positions=tuple(positions), gap=gap, gap_kind=kind,
                              delta=_max_delta(alone.inputs.get(key), batched.inputs.get(key)))
    return Divergence(**base, decision=None, positions=(), gap=None, gap_kind="", delta=None)


def decision_gap(inputs: dict[str, torch.Tensor] | None, a: dict[str, Any], b: dict[str, Any], block_length: int,
                 thresholds: Sequence[float] = ()) -> tuple[list[int], float | None, str]:
    """(positions decided differently, the gap between the two best options of that decision in the
    batch-1 run, what the gap compares), for trace events `a` (batch 1) and `b` (batched).

    A lookahead resolution picks the best candidate score its decoder traced (RPS `candidates`,
    LoPA `scores`). A step or block opening commits tokens at positions: where both runs committed
    a position with different tokens, the options are its two most likely tokens (logit gap);
    where only one run committed (or remasked) a position, they are that position against another
    such position (confidence gap) or against a commit threshold of the decoder (tau...)."""
    ta, tb = dict(map(tuple, a["committed"])), dict(map(tuple, b["committed"]))
    tokens = sorted(p for p in ta if p in tb and ta[p] != tb[p])
    one_side = sorted(set(ta) ^ set(tb) | set(a.get("remasked", [])) ^ set(b.get("remasked", [])))
    positions = sorted(set(tokens) | set(one_side)) or sorted(ta)  # or: same commits, another forward or choice
    if a["phase"] == "resolve":
        scores = [c["score"] for c in a.get("candidates", []) if isinstance(c, dict) and "score" in c] \
            or list(a.get("scores", []))
        if len(scores) < 2:
            return positions, None, "resolve without traced scores"
        top = sorted(scores, reverse=True)
        return positions, top[0] - top[1], "candidate scores"
    if inputs is None or "logits" not in inputs or not positions:
        return positions, None, "no observed logits"
    logits = inputs["logits"]  # [L, V]
    local = lambda ps: [p % block_length for p in ps]  # noqa: E731
    gaps = []
    if tokens or not one_side:
        top2 = logits[local(tokens or positions)].topk(2, dim=-1).values  # [|D|, 2]
        gaps.append((float((top2[:, 0] - top2[:, 1]).min()), "token logits"))
    if one_side:
        conf = torch.softmax(logits[local(one_side)], dim=-1).max(-1).values.sort().values  # [|D|]
        if conf.numel() >= 2:
            gaps.append((float((conf[1:] - conf[:-1]).min()), "position confidences"))
        for tau in thresholds:
            gaps.append((float((conf - tau).abs().min()), f"confidence vs threshold {tau:g}"))
    if not gaps:
        return positions, None, "no comparable options"
    gap, kind = min(gaps)
    return positions, gap, kind


def _max_delta(a: dict[str, torch.Tensor] | None, b: dict[str, torch.Tensor] | None) -> float | None:
    if a is None or b is None:
        return None
    common = [k for k in a if k in b and a[k].shape == b[k].shape]
    return max((float((a[k] - b[k]).abs().max()) for k in common), default=None)
