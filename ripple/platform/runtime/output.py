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
    # forwards of the decoder's second model (a verifier beside the dLLM: decoders that declare an
    # auxiliary model), never in `nfe`: a verifier's forward is not a dLLM's. None: the decoder has none
    verifier_nfe: int | None = None

    @property
    def tps(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def canvas_tps(self) -> float:
        return self.gen_length / self.decode_seconds if self.decode_seconds > 0 else 0.0


def verifier_nfe(decoder, sample_memory: dict) -> int | None:
    """A sample's forwards of the decoder's second model (`BlockState.count_verifier`), or None for a
    decoder that declares none (its records then leave the count empty)."""
    from ...decoders.base import VERIFIER_NFE

    declares = getattr(decoder, "declares_auxiliary", None)
    return int(sample_memory.get(VERIFIER_NFE, 0)) if declares is not None and declares() else None


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so a clock read after it sees the work done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
