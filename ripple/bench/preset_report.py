"""`python -m ripple.bench --preset NAME`: what a GPU run of the paper's setting costs.

On a random-weight model of the preset's shapes (`presets.py`), for each cache policy:
the plain forward of a step of the first response block (at batch 1 and 8), the packed
lookahead with k variants of that block (k = 2, 4, 10; RPS's k_max is 10), the
lookahead/forward ratio (the RPS paper: about 1.15 on a GPU), and the decode TPS of
default, confidence and rps at the preset's gen/block lengths at batch 1 and 8. Every
timing synchronises the device before the clock is read. The run keeps to a wall-time
budget (5 minutes by default): a decode whose estimate (its NFE times the measured
forward) would overrun it is reported as skipped instead of run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..decoders import build
from ..platform.runtime.engine import Engine, GenerationConfig, synchronize
from ..platform.runtime.models import get_family
from .presets import Preset, parameter_count, random_engine
from .timing import median_ms

CACHES = ("none", "prefix", "dual")
KS = (2, 4, 10)
BATCHES = (1, 8)
DECODERS = ("default", "confidence", "rps")


@dataclass(frozen=True)
class ForwardRow:
    cache: str
    tokens_fed: int  # per row: the recomputed window
    forward_ms: dict[int, float]  # batch size -> plain forward
    lookahead_ms: dict[int, float]  # k -> packed lookahead with k variants, batch 1

    def ratio(self, k: int) -> float:
        return self.lookahead_ms[k] / self.forward_ms[1]


@dataclass(frozen=True)
class DecodeRow:
    cache: str
    decoder: str
    batch: int
    nfe: float | None = None  # mean per row
    seconds: float | None = None
    tps: float | None = None  # generated tokens of every row / seconds
    skipped: str | None = None


@dataclass
class PresetReport:
    preset: Preset
    device: str
    dtype: str
    parameters: int
    budget_s: float
    opening_ms: dict[int, float] = field(default_factory=dict)  # batch size -> block-opening forward
    forwards: list[ForwardRow] = field(default_factory=list)
    decodes: list[DecodeRow] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        p = self.preset
        return {"preset": p.name, "device": self.device, "dtype": self.dtype, "parameters": self.parameters,
                "prompt_tokens": p.prompt_tokens, "gen_length": p.gen_length, "block_length": p.block_length,
                "budget_s": self.budget_s, "seconds": self.seconds, "block_opening_ms": self.opening_ms,
                "forwards": [{**f.__dict__, "ratio": {k: f.ratio(k) for k in f.lookahead_ms}} for f in self.forwards],
                "decodes": [d.__dict__ for d in self.decodes]}

    def format(self) -> str:
        p = self.preset
        family = get_family(p.config["model_type"])
        c = family.to_config(p.config)
        moe = f", MoE {c.moe.n_experts} experts x {c.moe.hidden} top-{c.moe.top_k}" if c.moe else ""
        ks = sorted(self.forwards[0].lookahead_ms) if self.forwards else []
        bs = sorted(self.opening_ms)
        lines = [f"preset {p.name}: {family.name} family, d_model {c.d_model}, {c.n_layers} layers, {c.n_heads} heads, "
                 f"mlp {c.mlp_hidden}{moe}, vocab {c.vocab_size} ({_count(self.parameters)} parameters), "
                 f"random weights, {self.dtype} on {self.device}; canvas {p.prompt_tokens} prompt + {p.gen_length} "
                 f"response tokens, block {p.block_length}",
                 "block-opening forward (full canvas, fills the KV cache): "
                 + ", ".join(f"{self.opening_ms[b]:.1f} ms at batch {b}" for b in bs),
                 f"{'cache':<8}{'tokens fed':>11}" + "".join(f"{f'forward b{b} ms':>16}" for b in bs)
                 + "".join(f"{f'lookahead k={k} ms':>19}" for k in ks) + "".join(f"{f'ratio k={k}':>11}" for k in ks)]
        for f in self.forwards:
            lines.append(f"{f.cache:<8}{f.tokens_fed:>11}" + "".join(f"{f.forward_ms[b]:>16.2f}" for b in bs)
                         + "".join(f"{f.lookahead_ms[k]:>19.2f}" for k in ks)
                         + "".join(f"{f.ratio(k):>11.2f}" for k in ks))
        lines.append(f"lookahead k: k variants of the {p.block_length}-token block packed after the fed tokens "
                     f"(batch 1); ratio = lookahead / plain forward at batch 1")
        lines.append(f"decode at gen {p.gen_length} / block {p.block_length} (random weights are never confident: "
                     f"one token per step for every decoder); tokens/s counts every row of the batch")
        lines.append(f"{'cache':<8}{'decoder':<12}{'batch':>6}{'NFE/row':>9}{'seconds':>9}{'tokens/s':>10}"
                     f"{'vs batch 1':>12}")
        alone = {(d.cache, d.decoder): d.tps for d in self.decodes if d.batch == 1 and d.tps}
        order = {c: i for i, c in enumerate(CACHES)}
        for d in sorted(self.decodes, key=lambda d: (d.batch, order.get(d.cache, 0))):
            if d.skipped:
                lines.append(f"{d.cache:<8}{d.decoder:<12}{d.batch:>6}  skipped: {d.skipped}")
                continue
            base = alone.get((d.cache, d.decoder))
            vs = f"{d.tps / base:.2f}x" if base and d.batch > 1 else ""
            lines.append(f"{d.cache:<8}{d.decoder:<12}{d.batch:>6}{d.nfe:>9.1f}{d.seconds:>9.2f}{d.tps:>10.1f}{vs:>12}")
        lines.append(f"whole run {self.seconds:.0f} s (budget {self.budget_s:.0f} s)")
        return "\n".join(lines)


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


class _Canvas:
    """A batch of canvases mid-way through the first response block: [B, N] tokens, positions, pads."""

    def __init__(self, engine: Engine, preset: Preset, batch: int, gen: torch.Generator):
        dev, V, mask = engine.device, engine.model.vocab_size, engine.mask_id
        P, L = preset.prompt_tokens, preset.block_length
        # a block-causal family (LLaDA2) sees the canvas up to the block's end (prompt_tokens is block-aligned)
        self.block = L if engine.block_causal else None
        self.N = P + (L if engine.block_causal else preset.gen_length)
        self.lo, self.hi = P, P + L
        self.canvas = torch.randint(2, V - 2, (batch, self.N), generator=gen, device=dev)  # [B, N]
        self.canvas[:, P:] = mask
        self.canvas[:, P:P + L // 2] = torch.randint(2, V - 2, (batch, L // 2), generator=gen, device=dev)
        self.positions = torch.arange(self.N, device=dev)[None].expand(batch, -1)  # [B, N]
        self.pad = torch.zeros(batch, self.N, dtype=torch.bool, device=dev)

    def window(self, cache: str) -> tuple[int, int]:
        return {"none": (0, self.N), "prefix": (self.lo, self.N), "dual": (self.lo, self.hi)}[cache]


def run_preset(preset: Preset, device: str, dtype: str, *, reps: int = 10, ks=KS, batches=BATCHES, caches=CACHES,
               decoders=DECODERS, budget_s: float = 300.0, log: Callable[[str], None] = lambda s: None) -> PresetReport:
    started = time.perf_counter()
    dev = torch.device(device)
    engine = random_engine(preset, dev, getattr(torch, dtype))
    report = PresetReport(preset, torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", dtype,
                          parameter_count(engine), budget_s)
    log(f"model built in {time.perf_counter() - started:.1f} s")
    gen = torch.Generator(device=dev).manual_seed(0)
    L = preset.block_length
    canvases = {b: _Canvas(engine, preset, b, gen) for b in batches}
    with torch.inference_mode():
        kvs, block_rows = {}, torch.arange(canvases[1].lo, canvases[1].hi, device=dev)
        for b, cv in canvases.items():
            _, kvs[b] = engine.forward_full(cv.canvas, cv.positions, cv.pad, block_rows, True, block=cv.block)
            report.opening_ms[b] = median_ms(lambda: engine.forward_full(cv.canvas, cv.positions, cv.pad, block_rows,
                                                                         True, block=cv.block), dev, reps)
        for cache in caches:
            fwd, look = {}, {}
            for b, cv in canvases.items():
                w0, w1 = cv.window(cache)
                kv = None if cache == "none" else kvs[b]
                rows = torch.arange(cv.lo - w0, cv.lo - w0 + L, device=dev)
                fwd[b] = median_ms(lambda: engine.forward_window(cv.canvas, cv.positions, cv.pad, kv, w0, w1, cv.lo,
                                                                 cv.hi, None, rows, block=cv.block), dev, reps)
            cv, kv = canvases[1], None if cache == "none" else kvs[1]
            w0, w1 = cv.window(cache)
            rows = torch.arange(cv.lo - w0, cv.lo - w0 + L, device=dev)
            for k in ks:
                variants = cv.canvas[:, cv.lo:cv.hi][:, None].repeat(1, k, 1)  # [1, k, L]
                variants[0, :, L // 2] = torch.arange(2, 2 + k, device=dev)
                var_rows = (w1 - w0 + torch.arange(k, device=dev)[:, None] * L + torch.arange(L, device=dev)[None])
                out_rows = torch.cat((rows, var_rows.reshape(-1)))
                look[k] = median_ms(lambda: engine.forward_window(cv.canvas, cv.positions, cv.pad, kv, w0, w1, cv.lo,
                                                                  cv.hi, variants, out_rows, block=cv.block), dev, reps)
            report.forwards.append(ForwardRow(cache, w1 - w0, fwd, look))
            log(f"forwards, cache {cache}: done at {time.perf_counter() - started:.0f} s")
    if preset.decoders is not None and decoders is DECODERS:  # the preset names what it decodes
        decoders = preset.decoders
    _decodes(engine, preset, report, caches, decoders, batches, started, gen, log)
    report.seconds = time.perf_counter() - started
    return report


def _decodes(engine: Engine, preset: Preset, report: PresetReport, caches, decoders, batches, started: float,
             gen: torch.Generator, log) -> None:
    """Decode TPS per cache, decoder and batch size, within the budget: the cheapest policy first at each
    batch size, so an overrun skips the full-canvas (cache none) decodes at batch 8 first."""
    dev, V = engine.device, engine.model.vocab_size
    forward_ms = {f.cache: f.forward_ms for f in report.forwards}
    config = {c: GenerationConfig(preset.gen_length, preset.block_length, c) for c in caches}
    prompts = {b: torch.randint(2, V - 2, (b, preset.prompt_tokens), generator=gen, device=dev).tolist()
               for b in batches}
    for b in batches:
        for cache in reversed(caches):
            for entry in decoders:
                label, name, settings = (entry, entry, ()) if isinstance(entry, str) else entry
                # one forward per committed token at most (random weights): NFE <= gen_length
                estimate = preset.gen_length * forward_ms[cache][b] / 1e3
                left = report.budget_s - (time.perf_counter() - started)
                if estimate > left:
                    report.decodes.append(DecodeRow(cache, label, b, skipped=f"estimated {estimate:.0f} s, "
                                                    f"{max(left, 0):.0f} s of the budget left"))
                    continue
                synchronize(dev)
                t = time.perf_counter()
                outs = engine.generate(prompts[b], build(name, dict(settings)), config[cache])
                synchronize(dev)
                seconds = time.perf_counter() - t
                tokens = sum(o.generated_tokens for o in outs)
                report.decodes.append(DecodeRow(cache, label, b, sum(o.nfe for o in outs) / b, seconds, tokens / seconds))
                log(f"decode {cache} {label} batch {b}: {seconds:.1f} s")
