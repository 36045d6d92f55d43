"""Parallel failures: where a decoder's decode first left a reference's, and whether that decision
came from a forward whose outputs committed several tokens at once.

Pure functions over decode traces (no store, no torch), used by the metrics module
(`parallel_failures`: reports, leaderboard, MLflow) and the trace page. A trace is a sequence of
decisions, each with `forward` (the sample's forward whose outputs it read), `commits` ((position,
token, ...) tuples), `edits` ((position, old, new, ...)) and `remasks` (positions):
ripple.platform.runtime.tracing.Decision has these. The reference is the oracle's type
(reference.py's `Reference`): a reference cell's trace replays to it with `Reference.from_trace`.

- `first_divergence(decisions, reference)`: the first commit (or edit) of a token that differs from
  the reference's at its position, with the forward it was decided from: `parallel` when that
  forward's outputs committed two or more tokens (a lookahead's resolve and the step that uses its
  carried distributions count together), `duplicate` when they committed the wrong token at two or
  more positions (RPS writing the same name at two places of a line), `twice` when the decode ends
  holding the wrong token at two or more positions, more than the reference does, whichever forwards
  wrote them
  (so a decoder that commits the second copy from a later forward, as RPS with `carry=false` does
  after a lookahead, still counts: `duplicate` cannot tell it from one that never writes it).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .reference import Reference


@dataclass(frozen=True)
class Divergence:
    """The first decision writing a token the reference does not have at that position."""

    decision: int  # index of the decision in the trace
    forward: int  # the forward whose outputs it read
    position: int  # response position
    token: int  # what the decoder wrote there
    reference: int  # what the reference left there
    forward_commits: tuple[tuple[int, int], ...]  # every (position, token) committed from that forward
    # positions holding `token` once the decode ends, and once the reference's ended
    written: int = 1
    in_reference: int = 0

    @property
    def parallel(self) -> bool:
        """The forward's outputs committed two or more tokens."""
        return len(self.forward_commits) >= 2

    @property
    def duplicate(self) -> bool:
        """The forward's outputs committed the wrong token at two or more positions."""
        return sum(t == self.token for _, t in self.forward_commits) >= 2

    @property
    def twice(self) -> bool:
        """The decode ends with the wrong token at two or more positions, more than the reference has it at
        (whichever forwards wrote them)."""
        return self.written >= 2 and self.written > self.in_reference


def first_divergence(decisions: Sequence[Any], reference: Reference) -> Divergence | None:
    """The first commit or edit of a token differing from `reference` at its position (positions the
    reference does not hold are skipped), or None when the decode never leaves the reference."""
    for i, d in enumerate(decisions):
        written = [(c[0], c[1]) for c in d.commits] + [(e[0], e[2]) for e in d.edits]
        for pos, tok in written:
            ref = reference.get(pos)
            if ref is not None and tok != ref:
                together = tuple((c[0], c[1]) for x in decisions if x.forward == d.forward for c in x.commits)
                final = Reference.from_trace(decisions).written()
                return Divergence(i, d.forward, pos, tok, ref, together, final.count(tok),
                                  reference.written().count(tok))
    return None


@dataclass(frozen=True)
class FailureCount:
    """A decoder's samples the reference gets right and it gets wrong, by their first wrong commit."""

    wrong: int  # wrong where the reference is right (and both have traces)
    parallel: int  # ... whose first wrong commit came from a forward that committed several tokens
    duplicate: int  # ... of those, the wrong token committed at two or more positions
    examples: tuple[str, ...]  # sample ids of up to `keep` such samples (parallel first)
    twice: int = 0  # wrong ones ending with their first wrong token at 2+ positions, more than the reference

    @property
    def parallel_share(self) -> float | None:
        return self.parallel / self.wrong if self.wrong else None

    @property
    def duplicate_share(self) -> float | None:
        return self.duplicate / self.wrong if self.wrong else None

    @property
    def twice_share(self) -> float | None:
        return self.twice / self.wrong if self.wrong else None


def count_failures(samples: Iterable[tuple[str, bool, Sequence[Any], bool, Sequence[Any]]],
                   keep: int = 5) -> FailureCount:
    """Tally (sample id, decoder correct, decoder trace, reference correct, reference trace) rows:
    only samples the reference gets right and the decoder gets wrong count."""
    kinds: Counter = Counter()
    found: list[tuple[int, str]] = []
    for sid, ok, trace, ref_ok, ref_trace in samples:
        if ok or not ref_ok:
            continue
        kinds["wrong"] += 1
        div = first_divergence(trace, Reference.from_trace(ref_trace))
        rank = 2
        if div is not None and div.twice:
            kinds["twice"] += 1
        if div is not None and div.parallel:
            kinds["parallel"] += 1
            rank = 1
            if div.duplicate:
                kinds["duplicate"] += 1
                rank = 0
        found.append((rank, sid))
    examples = tuple(sid for _, sid in sorted(found, key=lambda x: x[0])[:keep])
    return FailureCount(kinds["wrong"], kinds["parallel"], kinds["duplicate"], examples, kinds["twice"])
