"""`renoise`: DiffusionGemma's entropy-bound sampler, the one decoder of uniform-noise families.

A canvas of block-length random tokens is denoised for at most `steps` decoder forwards. Step s
of a canvas (the reference counts n = steps - s down to 1) tempers the logits with
t = t_min + (t_max - t_min) * n / steps (float32; the first step uses t_max and the last never
reaches t_min) and sorts the positions by the entropy of the tempered distribution, ascending:
a position keeps its sampled token when the entropies before it in that order sum to at most
`entropy_bound` (the lowest-entropy position always does); the engine redraws every other
position uniformly. Nothing is frozen: a kept token is redrawn the next step unless kept again.
The canvas ends when its argmax equals each of the last `stability` argmax canvases (never in its
first `stability` steps; 0: always) and the mean entropy is below `confidence`, or after `steps`
forwards; the engine emits the last step's argmax. The tempered logits are the next forward's
self-conditioning input. Rules and their float32 arithmetic: ../shared/golden/README.md
"diffusion-gemma-tiny" (transformers 5.24's `EntropyBoundSampler` and DiffusionGemma `generate`).

Defaults are google/diffusiongemma-26B-A4B-it's generation_config.json; `ripple generate` and
`ripple eval` take the unset ones from the model's own generation_config.json (`model_defaults`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..lazy import torch
from .base import BlockState, Plan, Scheduler
from .params import HyperParams, hp
from .registry import register


@dataclass(frozen=True)
class RenoiseParams(HyperParams):
    steps: int = hp(48, 1, None, doc="decoder forwards per canvas at most (max_denoising_steps)", search=(8, 64))
    t_max: float = hp(0.8, 0.0, None, lo_open=True, doc="temperature of a canvas's first step", search=(0.3, 1.2))
    t_min: float = hp(0.4, 0.0, None, doc="temperature the schedule falls towards (never reached)",
                      search=(0.05, 0.6))
    entropy_bound: float = hp(0.1, 0.0, None, doc="a position keeps its sample while the entropies before it "
                                                  "(ascending) sum to at most this", search=(0.01, 4.0))
    stability: int = hp(1, 0, None, doc="steps the argmax canvas must repeat before a canvas may end "
                                        "(stability_threshold)", search=(0, 3))
    confidence: float = hp(0.005, 0.0, None, doc="a canvas may end once its mean entropy is below this "
                                                 "(confidence_threshold)", search=(0.001, 1.0))


# generation_config.json key -> hyperparameter (entropy_bound sits in its sampler_config)
_GENERATION_KEYS = {"max_denoising_steps": "steps", "t_max": "t_max", "t_min": "t_min",
                    "stability_threshold": "stability", "confidence_threshold": "confidence"}


@register
class Renoise(Scheduler):
    name = "renoise"
    display_order = 85  # after the mask decoders, before rps (listed last)
    Params = RenoiseParams
    noise = "uniform"
    default_cache = "prefix"  # the encoder's cache of prompt and emitted canvases, extended per canvas
    supported_caches = ("prefix", "none")

    @property
    def max_canvas_forwards(self) -> int:
        return self.params.steps

    @classmethod
    def model_defaults(cls, generation: dict[str, Any]) -> dict[str, str]:
        out = {ours: str(generation[key]) for key, ours in _GENERATION_KEYS.items() if generation.get(key) is not None}
        bound = (generation.get("sampler_config") or {}).get("entropy_bound")
        if bound is not None:
            out["entropy_bound"] = str(bound)
        return out

    def temperature(self, step: int) -> torch.Tensor:
        """The float32 temperature of a canvas's step (0-based): a 0-dim tensor."""
        p = self.params
        n = torch.tensor(p.steps - step, dtype=torch.int32)
        return p.t_min + (p.t_max - p.t_min) * (n / p.steps)  # float32 tensor arithmetic, as the reference

    def step(self, state: BlockState) -> Plan:
        p = self.params
        t = self.temperature(state.step)
        z = state.logits.float() / t.to(state.logits.device)  # [L, V] tempered logits
        h = torch.distributions.Categorical(logits=z, validate_args=False).entropy()  # [L] float32
        ordered, order = torch.sort(h)
        before = torch.cumsum(ordered, 0) - ordered  # [L] entropy of the positions before each
        keep = torch.zeros_like(h, dtype=torch.bool)
        keep[order[before <= p.entropy_bound]] = True
        top = z.argmax(dim=-1)  # [L]
        history = state.memory.setdefault("argmax", [torch.full_like(top, -1)] * p.stability)
        stable = all(bool((top == past).all()) for past in history)
        state.memory["argmax"] = (history + [top])[1:]  # the last `stability` argmax canvases
        mean = h.mean()
        confident = bool(mean < p.confidence)
        stop = stable and confident  # the stop rule; the step limit ends a canvas too
        return Plan(sample=z, keep=keep, carry=z, end=stop or state.step + 1 >= p.steps,
                    info={"temperature": float(t), "mean_entropy": float(mean), "stable": stable,
                          "confident": confident, "stop": stop})
