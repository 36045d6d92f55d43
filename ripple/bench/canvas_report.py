"""`python -m ripple.bench --preset diffusion-gemma-26b`: what DiffusionGemma's passes cost here.

A uniform-noise family (models/diffusion_gemma.py, its module in diffusion_gemma_model.py) is not
decoded by the mask engine, so its preset report times the model's own passes on random weights of
the preset's shapes, at batch 1:
the encoder over the prompt (a new KV cache), the decoder over a canvas without and with
self-conditioning (every denoising step after a canvas's first feeds the previous logits back),
and the encoder extending the cache by an emitted canvas. Each timing is a median of runs with the
device synchronised before the clock is read; the number of runs shrinks to keep the wall-time
budget. Memory: the peak (CUDA: allocated by torch; CPU: the process's resident set, the
kernel's ru_maxrss) against the bytes of the weights, and the resident set before the model was
built (interpreter and torch). The full model's text weights are counted from its shapes.
"""
from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..platform.runtime.engine import synchronize
from ..platform.runtime.loading import hollow
from ..platform.runtime.models import get_family
from .presets import DIFFUSION_GEMMA_26B, Preset, random_model
from .timing import median_ms

STEPS = 48  # the released generation_config's max_denoising_steps: decoder passes per canvas at most
PROMPT, DECODER, DECODER_SC, EXTENSION = ("encoder: prompt, new cache", "decoder: canvas",
                                          "decoder: canvas, self-conditioning", "encoder: canvas appended to cache")


@dataclass(frozen=True)
class PassRow:
    name: str
    tokens: int  # fed per row
    ms: float  # median
    runs: int


@dataclass
class CanvasReport:
    preset: Preset
    device: str
    dtype: str
    parameters: int
    weight_bytes: int  # the built model's parameters and buffers
    full_weight_bytes: int  # the same for the released layer count, from its shapes
    full_layers: int
    before_bytes: int  # resident (CPU) or allocated (CUDA) before the model was built
    peak_bytes: int
    budget_s: float
    passes: list[PassRow] = field(default_factory=list)
    seconds: float = 0.0

    def ms(self, name: str) -> float:
        return next(p.ms for p in self.passes if p.name == name)

    def canvas_seconds(self) -> float:
        """One canvas at STEPS denoising steps: a decoder pass without self-conditioning, STEPS - 1 with
        it, and the encoder pass that appends the emitted canvas."""
        return (self.ms(DECODER) + (STEPS - 1) * self.ms(DECODER_SC) + self.ms(EXTENSION)) / 1e3

    def to_dict(self) -> dict:
        p = self.preset
        return {"preset": p.name, "device": self.device, "dtype": self.dtype, "parameters": self.parameters,
                "weight_bytes": self.weight_bytes, "full_weight_bytes": self.full_weight_bytes,
                "full_layers": self.full_layers, "before_bytes": self.before_bytes, "peak_bytes": self.peak_bytes,
                "peak_over_weights": self.peak_bytes / self.weight_bytes, "prompt_tokens": p.prompt_tokens,
                "canvas_length": p.block_length, "budget_s": self.budget_s, "seconds": self.seconds,
                "passes": [r.__dict__ for r in self.passes], "canvas_seconds": self.canvas_seconds(),
                "steps": STEPS}

    def format(self) -> str:
        p, gib = self.preset, 2 ** 30
        c = get_family(p.config["model_type"]).to_config(p.config)
        kinds = ", ".join(f"{'sliding' if s.sliding else 'full'} {c.n_heads} heads x {s.head_dim} "
                          f"({s.kv_heads} KV)" for s in c.layers)
        peak_what = "allocated" if self.device != "cpu" else "resident"
        lines = [f"preset {p.name}: diffusion_gemma family, hidden {c.d_model}, {c.n_layers} layers ({kinds}), "
                 f"MoE {c.moe.n_experts} experts x {c.moe.hidden} top-{c.moe.top_k} beside a dense MLP of "
                 f"{c.mlp_hidden}, vocab {c.vocab_size} ({_count(self.parameters)} parameters), random weights, "
                 f"{self.dtype} on {self.device}",
                 f"weights {self.weight_bytes / gib:.2f} GiB; peak {peak_what} {self.peak_bytes / gib:.2f} GiB = "
                 f"{self.peak_bytes / self.weight_bytes:.2f}x the weights ({self.before_bytes / gib:.2f} GiB "
                 f"before the model was built); the {self.full_layers}-layer model's text weights: "
                 f"{self.full_weight_bytes / gib:.1f} GiB in {self.dtype}",
                 f"{'pass (batch 1)':<38}{'tokens':>8}{'ms':>11}{'runs':>6}"]
        for r in self.passes:
            lines.append(f"{r.name:<38}{r.tokens:>8}{r.ms:>11.1f}{r.runs:>6}")
        lines.append(f"one canvas of {p.block_length} tokens at {STEPS} denoising steps (a decoder pass, {STEPS - 1} "
                     f"with self-conditioning, the cache extension): {self.canvas_seconds():.1f} s with these "
                     f"{c.n_layers} layers")
        lines.append(f"whole run {self.seconds:.0f} s (budget {self.budget_s:.0f} s)")
        return "\n".join(lines)


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


def _bytes(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])


def _full_weight_bytes(dtype: torch.dtype) -> tuple[int, int]:
    """(text weight bytes in `dtype`, layers) of the released model, from a module built on the meta device."""
    family = get_family(DIFFUSION_GEMMA_26B["model_type"])
    cfg = family.to_config(DIFFUSION_GEMMA_26B)
    with hollow():
        model = family.build(cfg).to(dtype)
    return _bytes(model), cfg.n_layers


def _resident_now() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def _memory(dev: torch.device) -> tuple[Callable[[], int], int]:
    """(peak so far, bytes in use now) for the device."""
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        return (lambda: torch.cuda.max_memory_allocated(dev)), torch.cuda.memory_allocated(dev)
    return (lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024), _resident_now()  # Linux: KiB


def run_canvas_preset(preset: Preset, device: str, dtype: str, *, reps: int = 10, budget_s: float = 300.0,
                      log: Callable[[str], None] = lambda s: None) -> CanvasReport:
    started = time.perf_counter()
    dev, dt = torch.device(device), getattr(torch, dtype)
    peak, before = _memory(dev)
    model = random_model(preset, dev, dt)
    full_bytes, full_layers = _full_weight_bytes(dt)
    report = CanvasReport(preset, torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", dtype,
                          sum(p.numel() for p in model.parameters()), _bytes(model), full_bytes, full_layers, before,
                          0, budget_s)
    log(f"model built in {time.perf_counter() - started:.1f} s")
    gen = torch.Generator(device=dev).manual_seed(0)
    V, P, L = model.vocab_size, preset.prompt_tokens, preset.block_length
    prompt = torch.randint(3, V, (1, P), generator=gen, device=dev)  # [1, P]
    canvas = torch.randint(0, V, (1, L), generator=gen, device=dev)  # [1, L], as a canvas starts
    with torch.inference_mode():
        cache = model.encode(prompt).cache
        sc = model.decode(canvas, cache)  # [1, L, V]: the next step's self-conditioning input
        passes = [(PROMPT, P, lambda: model.encode(prompt)),
                  (DECODER, L, lambda: model.decode(canvas, cache)),
                  (DECODER_SC, L, lambda: model.decode(canvas, cache, self_conditioning=sc)),
                  (EXTENSION, L, lambda: model.encode(canvas, cache=cache))]
        for i, (name, tokens, fn) in enumerate(passes):
            synchronize(dev)
            t = time.perf_counter()
            fn()  # warm-up, and the estimate of one run
            synchronize(dev)
            once = time.perf_counter() - t
            left = budget_s - (time.perf_counter() - started)
            runs = max(1, min(reps, int(left / (len(passes) - i) / max(once, 1e-6))))
            report.passes.append(PassRow(name, tokens, median_ms(fn, dev, runs, warmup=0), runs))
            log(f"{name}: {report.passes[-1].ms:.1f} ms ({runs} runs)")
    report.peak_bytes = peak()
    report.seconds = time.perf_counter() - started
    return report
