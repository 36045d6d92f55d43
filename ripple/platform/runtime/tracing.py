"""Decode traces kept with a sample's record: the engine's trace events turned into a compact,
per-sample `Trace` (a grid's `traces: true`, `ripple eval --traces`, `ripple.evaluate(traces=True)`).

Why a trace is indexed by forward: a parallel decoder's failure is a decision taken from one
forward's outputs that does not fit with another taken from the same outputs. Every decision names
the forward whose outputs it read (`Decision.forward`, the sample's forwards counted so far), so a
lookahead decoder's resolve and the step after it, which uses the distributions carried out of that
packed forward, belong to the same forward; `variant` says which of its copies the distributions
came from (None: the plain rows or the anchor). Each commit and edit carries the probability those
outputs gave its token. The decoder's own event keys (RPS's pivot and candidate table, ...) ride
along in `info`, as `ripple generate --trace` writes them.

Stored form (`Trace.dumps`): one JSON array per decision, probabilities to 4 digits; the store's
Parquet column compresses it (docs/grids.md gives the bytes per sample).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable

DIGITS = 4  # a probability's stored digits
ENGINE_KEYS = ("sample", "block", "step", "phase", "committed", "forward", "nfe", "p", "variant", "sub_block",
               "remasked", "edited", "p_edit")


def token_probs(logits, positions, tokens) -> list[float]:
    """The probability [k] that logits [L, V] give each token [k] at its block position [k] (float64 softmax,
    as decoders read them)."""
    import torch

    if not positions.numel():
        return []
    rows = torch.softmax(logits[positions.to(logits.device)].to(torch.float64), dim=-1)  # [k, V]
    return rows.gather(1, tokens.to(rows.device).view(-1, 1)).view(-1).tolist()


def carried_variant(carried, anchor, variants) -> int | None:
    """Which copy of a packed forward the carried rows [L, V] are: a variant's index, or None for the
    anchor (or rows of the decoder's own making). Compared by storage, not value: `resolve` returns one
    of the tensors it was handed (a slice of `variants` [m, L, V])."""
    if carried.data_ptr() == anchor.data_ptr():
        return None
    step = variants.stride(0) * variants.element_size()
    for j in range(variants.shape[0]):
        if carried.data_ptr() == variants.data_ptr() + j * step:
            return j
    return None


def read_keys(logits, commit, read=None) -> dict[str, Any]:
    """A decision's trace keys about what it read: `p`, the probability [k] its outputs gave each committed
    token, from the step's logits [L, V] or a resolve's anchor (`read`: anchor [L, V], variants [m, L, V]);
    for a resolve also `variant`, the copy whose rows it carried (`logits`, set from them)."""
    if read is None:
        return {"p": token_probs(logits, commit.positions, commit.tokens)}
    return {"p": token_probs(read[0], commit.positions, commit.tokens), "variant": carried_variant(logits, *read)}


@dataclass(frozen=True)
class Decision:
    """One decision of a decoder: what it wrote, and which forward's outputs it read."""

    forward: int  # 1-based index of the sample's forward whose outputs the decision read (0: none yet)
    variant: int | None  # the packed forward's copy whose carried distributions it read (None: plain/anchor)
    phase: str  # open, step, resolve, post, fill
    block: int
    step: int
    commits: tuple[tuple[int, int, float], ...]  # (response position, token id, probability)
    edits: tuple[tuple[int, int, int, float], ...] = ()  # (response position, old id, new id, probability)
    remasks: tuple[int, ...] = ()  # response positions set back to the mask id
    info: dict[str, Any] = field(default_factory=dict, compare=False)  # the decoder's own keys

    def row(self) -> list:
        return [self.forward, self.variant, self.phase, self.block, self.step,
                [list(c) for c in self.commits], [list(x) for x in self.edits],
                list(self.remasks), self.info]

    @classmethod
    def from_row(cls, row: list) -> "Decision":
        f, v, ph, b, s, c, e, rm, info = row
        return cls(f, v, ph, b, s, tuple(map(tuple, c)), tuple(map(tuple, e)), tuple(rm), info)


@dataclass(frozen=True)
class Trace:
    """One sample's decisions in order (what the store keeps with its record)."""

    decisions: tuple[Decision, ...]

    def dumps(self) -> str:
        return json.dumps([d.row() for d in self.decisions], separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> "Trace":
        return cls(tuple(Decision.from_row(r) for r in json.loads(text)))

    @classmethod
    def from_events(cls, events: Iterable[dict]) -> "Trace":
        """A sample's trace from its engine events (`ripple generate --trace`'s lines). A step reading the
        distributions a resolve carried out of a packed forward inherits that resolve's variant."""
        out, carried = [], {}  # forward -> variant of the last resolve that read it
        for e in events:
            if "committed" not in e:  # a renoising canvas's events: kept as the decoder's own
                out.append(Decision(int(e.get("nfe", 0)), None, str(e.get("phase", "")), int(e.get("canvas", 0)),
                                    int(e.get("step", 0)), (), (), (), {k: v for k, v in e.items() if k != "sample"}))
                continue
            fwd = int(e.get("nfe", 0))
            if e["phase"] == "resolve":
                carried[fwd] = e.get("variant")
            probs = e.get("p") or [float("nan")] * len(e["committed"])
            edit_p = e.get("p_edit") or [float("nan")] * len(e.get("edited", ()))
            out.append(Decision(
                fwd, carried.get(fwd), e["phase"], int(e["block"]), int(e["step"]),
                tuple((int(p), int(t), round(float(q), DIGITS)) for (p, t), q in zip(e["committed"], probs)),
                tuple((int(p), int(o), int(n), round(float(q), DIGITS))
                      for (p, o, n), q in zip(e.get("edited", ()), edit_p)),
                tuple(int(p) for p in e.get("remasked", ())),
                {k: v for k, v in e.items() if k not in ENGINE_KEYS}))
        return cls(tuple(out))


class TraceRecorder:
    """The engine's `trace` callback for a batch: collects each row's events; `traces()` gives one
    `Trace` per row."""

    def __init__(self, rows: int):
        self.events: list[list[dict]] = [[] for _ in range(rows)]

    def __call__(self, event: dict) -> None:
        self.events[int(event.get("sample", 0))].append(event)

    def traces(self) -> list[Trace]:
        return [Trace.from_events(ev) for ev in self.events]
