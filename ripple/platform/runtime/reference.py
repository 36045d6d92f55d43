"""A reference decode and where other decodes are measured against it: one type for the oracle's
reference run (issue 51) and the decode traces' reference comparison (issue 52, failures.py).

- The oracle: a decoder that declares `follows_reference` follows the completion another decoder
  writes for the same prompts under the same run settings (lengths, cache, block alignment,
  sub-blocks, seeds). The engine runs that decoder here first (`follow`), then hands each block state
  of the follower its sample's tokens (`Reference.block`); the followed decoder's forwards are the
  sample's `reference_nfe`, never its NFE, and the follower's decode clock starts after this run.
- Parallel failures: a stored `default` cell's trace replays to the same `Reference`
  (`Reference.from_trace`), and failures.py finds the first commit of another decoder that leaves it.

Both read the reference the same way: the token a decode left at each response position. A decode
replayed from its trace and the same decode read off the engine's canvas give equal References
(tests/platform/runtime/test_tracing.py checks it).

Torch is the lazy stand-in (ripple/lazy.py): the failure tables (reports, `ripple trace`) import this
module without importing torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from ...lazy import torch

if TYPE_CHECKING:
    from ...decoders.base import Scheduler
# `Engine` and `GenerationConfig` (engine.py) are named, not imported: the engine imports this module

NONE = -1  # a position the reference holds no token at (past its end; remasked and never rewritten)


@dataclass(frozen=True)
class Reference:
    """A sample's reference: the token the reference decode left at each response position, from the
    response's first position on (past gen_length too where a block-aligned family decodes its last
    block in full; NONE where it left none), and the forwards it took."""

    tokens: tuple[int, ...]
    nfe: int

    @classmethod
    def from_trace(cls, decisions: Iterable[Any]) -> "Reference":
        """Replay a decode trace's decisions (ripple.platform.runtime.tracing.Decision: commits, then
        edits, less remasks) to the tokens it left; its NFE is the last forward a decision read."""
        tokens: dict[int, int] = {}
        nfe = 0
        for d in decisions:
            nfe = max(nfe, d.forward)
            for c in d.commits:
                tokens[c[0]] = c[1]
            for e in d.edits:
                tokens[e[0]] = e[2]
            for p in d.remasks:
                tokens.pop(p, None)
        length = max(tokens, default=-1) + 1
        return cls(tuple(tokens.get(p, NONE) for p in range(length)), nfe)

    def get(self, position: int) -> int | None:
        """The reference's token at a response position, or None where it holds none."""
        if 0 <= position < len(self.tokens) and self.tokens[position] != NONE:
            return self.tokens[position]
        return None

    def written(self) -> list[int]:
        """The tokens it left, in position order (positions it holds none at skipped)."""
        return [t for t in self.tokens if t != NONE]

    def block(self, offset: int, length: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Reference tokens [length] at response positions offset .. offset + length - 1; NONE where the
        reference has none (a block's prompt tail, past its end)."""
        out = torch.full((length,), NONE, dtype=torch.long)
        lo, hi = max(0, offset), min(len(self.tokens), offset + length)
        if lo < hi:
            out[lo - offset:hi - offset] = torch.tensor(self.tokens[lo:hi], dtype=torch.long)
        return out.to(device)


def follow(engine: "Engine", prompts: Sequence[Sequence[int]], follower: "Scheduler", config: "GenerationConfig",
           seeds: Sequence[int] | None) -> list[Reference]:
    """Run the decoder `follower` follows on `prompts` with the follower's run settings; one Reference per
    prompt. The whole decoded canvas of each row is read, so the references cover every position the
    follower decodes (a block-aligned family's last block past gen_length included)."""
    followed = follower.reference_decoder()
    run = engine.start(prompts, followed, config, None, None, seeds)
    outs = run.execute()
    return [Reference(tuple(run.canvas[r, run.starts[r]:run.ends[r]].tolist()), out.nfe) for r, out in enumerate(outs)]
