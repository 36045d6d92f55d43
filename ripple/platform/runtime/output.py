"""What a `generate` call returns per sample, and the device wait that timing needs: shared by the
mask engine (engine.py) and the renoising loop (renoising.py)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SampleOutput:
    tokens: tuple[int, ...]  # the response ids: gen_length of them (a uniform-noise family: its whole canvases)
    nfe: int
    lookahead_nfe: int  # of which packed lookahead forwards
    decode_seconds: float
    generated_tokens: int  # response tokens before the first end-of-sequence id
    gen_length: int  # response positions decoded (len(tokens))
    edits: int = 0  # tokens rewritten by token editing (decoders that declare `edits_tokens`)
    encoder_nfe: int = 0  # of `nfe`, encoder passes (a uniform-noise family: prompt and emitted canvases)
    # forwards of the decoder a follower (the oracle) followed, never in `nfe`; None: no reference was run
    reference_nfe: int | None = None
    # forwards of the models the decoder declared beside this one, by role (auxiliary.py), never in `nfe`
    auxiliary_nfe: tuple[tuple[str, int], ...] = ()

    @property
    def verifier_nfe(self) -> int | None:
        """Forwards of the decoder's second models (a verifier beside the dLLM), summed over their roles;
        None for a decoder that declared none. Records, `Generation` and reports carry it apart from `nfe`:
        a verifier's forward is not a dLLM's."""
        return sum(n for _, n in self.auxiliary_nfe) if self.auxiliary_nfe else None

    @property
    def tps(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def canvas_tps(self) -> float:
        return self.gen_length / self.decode_seconds if self.decode_seconds > 0 else 0.0


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so a clock read after it sees the work done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
