"""Models a decoder needs beside the dLLM (a draft-and-verify decoder's verifier, issue 58): a seam,
so that a decoder with its own model is an addition to the engine, never a branch on its name.

- The decoder declares them per configuration, by role: `Scheduler.auxiliary_models()` returns
  {role: reference} (a folder, a hub id or an embedded name, from its hyperparameters); {} for
  every decoder that needs none, which then costs nothing.
- Whoever loads the dLLM loads each referenced model once (per worker and reference, not per
  sample) and hands it to the engine: `Engine(..., auxiliary={reference: model})`.
- The engine refuses, in one line before any forward, a decoder whose model it does not hold, and
  hands the decoder its models by role: `RunShape.models` in `prepare` (where the decoder refuses a
  model that cannot serve it) and `BlockState.models` in its steps.
- A model handed to a step is wrapped in `Counted`: each call is one forward of that role for the
  state's sample, reported apart from the dLLM's forwards (`SampleOutput.auxiliary_nfe`), never in `nfe`.
"""
from __future__ import annotations

from typing import Any, Mapping

from ...decoders.base import Scheduler
from ...errors import RippleError


def models_for(decoder: Scheduler, loaded: Mapping[str, Any]) -> dict[str, Any]:
    """The models `decoder` declares, by role, from `loaded` (by reference); one line naming the
    first one not loaded."""
    out = {}
    for role, reference in decoder.auxiliary_models().items():
        if reference not in loaded:
            held = ", ".join(sorted(loaded)) or "none"
            raise RippleError(f"decoder {decoder.name!r} needs its {role} model {reference!r} loaded beside the "
                              f"model; loaded: {held}")
        out[role] = loaded[reference]
    return out


class Counted:
    """A model handed to one sample's steps: every call counts one forward in `counts[row]`; every
    other attribute is the model's."""

    def __init__(self, model: Any, counts: list[int], row: int):
        self.model, self.counts, self.row = model, counts, row

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.counts[self.row] += 1
        return self.model(*args, **kwargs)
