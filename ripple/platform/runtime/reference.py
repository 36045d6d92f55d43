"""The reference run (issue 51): a decoder that declares `follows_reference` (the oracle) follows the
completion another decoder writes for the same prompts under the same run settings (lengths, cache,
block alignment, sub-blocks, seeds). The engine runs that decoder here first, then hands each block
state of the follower its sample's tokens (`Reference.block`); the followed decoder's forwards are
the sample's `reference_nfe`, never its NFE, and the follower's decode clock starts after this run.

`Reference` is one sample's reference tokens by response position: reusable wherever decoders are
compared with a reference decoder's final tokens (decode traces, issue 52).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

if TYPE_CHECKING:
    from ...decoders.base import Scheduler
# `Engine` and `GenerationConfig` (engine.py) are named, not imported: the engine imports this module


@dataclass(frozen=True)
class Reference:
    """A sample's reference: the token the followed decoder left at each response position, from the
    response's first position on (past gen_length too where a block-aligned family decodes its last
    block in full), and the forwards it took."""

    tokens: tuple[int, ...]
    nfe: int

    def block(self, offset: int, length: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Reference tokens [length] at response positions offset .. offset + length - 1; -1 where the
        reference has none (a block's prompt tail, past its end)."""
        out = torch.full((length,), -1, dtype=torch.long)
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
