"""The renoising loop: how the engine decodes a uniform-noise family (DiffusionGemma).

`Engine.generate` comes here when the model declares `noise = "uniform"` (a family property);
the decoder declares the same (ripple/decoders/base.py). The model offers `encode(ids, positions,
cache, valid) -> (hidden, cache)`, a causal pass that extends a KV cache, and `decode(canvas,
cache, positions, self_conditioning) -> logits`, which reads the cache and never writes it.

Per sample the engine owns one CPU `torch.Generator` seeded with the sample's seed and makes
exactly the reference's calls on it, in its order: per canvas one `randint` (the canvas's
uniform tokens), per step one `multinomial` over the decoder's tempered distribution, then one
`randint` for the whole canvas (the redraw of the positions the plan does not keep), also on a
canvas's last step. So a sample's tokens depend on its prompt, settings and seed only, never on
its batch, its place in it or the device (the draws read float32 probabilities moved to the CPU).

Per generate call: one encoder pass over the prompts (left-padded, padding slots hidden); then
ceil(gen_length / block_length) canvases of block_length tokens (whole canvases: the output can
be longer than gen_length, as the reference's is). A canvas runs decoder forwards until the
decoder ends it; the emitted canvas is the argmax of its last step. If it holds an
end-of-sequence id the sample ends there, every token after its first one becoming the pad id;
otherwise an encoder pass over the emitted canvas extends the cache (cache `prefix`; with `none`
the encoder recomputes prompt and emitted canvases from scratch) and the next canvas starts. The
last canvas is never encoded. NFE counts both kinds of call (`SampleOutput.encoder_nfe` the
encoder passes). Rows of a batch run a canvas's steps together; a row whose canvas ended waits
out of the forward (its cache rows are selected away) until every row's canvas has ended.
"""
from __future__ import annotations

import time
from typing import Sequence

import torch

from ...decoders.base import BlockState, Scheduler
from ...errors import RippleError
from .output import SampleOutput, synchronize


def check_plan(dec: Scheduler, plan, L: int, V: int) -> None:
    """A renoising plan keeps, samples and may carry; it never commits nor asks for segments."""
    if plan.sample is None or plan.keep is None:
        raise RippleError(f"decoder {dec.name!r} gave a renoising step without `sample` and `keep`")
    if tuple(plan.sample.shape) != (L, V) or tuple(plan.keep.shape) != (L,) or plan.keep.dtype != torch.bool:
        raise RippleError(f"decoder {dec.name!r}: a renoising plan needs sample [{L}, {V}] and keep [{L}] bool")
    if len(plan.commit) or len(plan.edit) or plan.remask.numel() or plan.variants is not None or plan.shadow \
            or plan.extent is not None or plan.defer:
        raise RippleError(f"decoder {dec.name!r} planned mask-decoding actions on a uniform-noise family")


class RenoisingRun:
    """One `generate` call on a uniform-noise family (module docstring)."""

    def __init__(self, engine, prompts: Sequence[Sequence[int]], decoder: Scheduler, cfg, seeds: Sequence[int],
                 trace=None, observe=None):
        self.e, self.dec, self.cfg, self.trace, self.observe = engine, decoder, cfg, trace, observe
        self.model = engine.model
        self.V = int(self.model.vocab_size)
        self.B = len(prompts)
        if len(seeds) != self.B:
            raise RippleError(f"{len(seeds)} seeds for {self.B} prompts; give one seed per prompt")
        self.lens = [len(p) for p in prompts]
        L = cfg.block_length
        self.n_canvases = -(-cfg.gen_length // L)  # whole canvases, the last one too
        longest = max(self.lens) + self.n_canvases * L
        if engine.max_positions is not None and longest > engine.max_positions:
            raise RippleError(f"prompt ({max(self.lens)} tokens) plus {self.n_canvases} canvases of {L} = {longest} "
                              f"exceeds the model's {engine.max_positions} positions")
        self.gens = [torch.Generator().manual_seed(int(s)) for s in seeds]  # CPU, one per sample
        P = max(self.lens)
        ids = torch.full((self.B, P), engine.pad_id, dtype=torch.long)
        valid = torch.zeros(self.B, P, dtype=torch.bool)
        for b, p in enumerate(prompts):
            ids[b, P - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
            valid[b, P - len(p):] = True
        self.ids, self.valid = ids, valid  # [B, P]: the left-padded prompts (and, cache none, the canvases after)
        self.prompt_width = P  # the columns of `ids` that are prompts: only they are checked as a prompt
        self.positions = (torch.arange(P)[None] - (P - torch.tensor(self.lens))[:, None]).clamp(min=0)  # [B, P]
        self.out: list[list[int]] = [[] for _ in range(self.B)]
        self.dec_nfe, self.enc_nfe = [0] * self.B, [0] * self.B
        self.t_end = [0.0] * self.B
        self.sample_memory: list[dict] = [{} for _ in range(self.B)]

    # ------------------------------------------------------------------ model calls
    def _encode(self, rows: list[int], cache, canvas: torch.Tensor | None, k: int):
        """The cache of `rows` after their prompts (canvas None) or after their emitted canvas k [G, L]."""
        dev, L = self.e.device, self.cfg.block_length
        sel = torch.tensor(rows)
        if canvas is not None and self.cfg.cache != "none":  # extend the cache by the canvas
            enc = self.model.encode(canvas.to(dev), self._canvas_positions(rows, k).to(dev), cache, None)
            fed = [L] * len(rows)
        else:
            if canvas is not None:  # cache none: prompt and emitted canvases, recomputed from scratch
                self.ids = torch.cat((self.ids, torch.zeros(self.B, L, dtype=torch.long)), dim=1)
                self.ids[sel, -L:] = canvas.cpu()
                self.valid = torch.cat((self.valid, torch.ones(self.B, L, dtype=torch.bool)), dim=1)
                self.positions = torch.cat((self.positions, self._canvas_positions(range(self.B), k)), dim=1)
            valid = self.valid[sel]
            enc = self.model.encode(self.ids[sel].to(dev), self.positions[sel].to(dev), None,
                                    None if bool(valid.all()) else valid.to(dev), prompt_columns=self.prompt_width)
            fed = [int(n) for n in valid.sum(dim=1).tolist()]
        for r, n in zip(rows, fed):
            self.enc_nfe[r] += 1
            if self.trace is not None:
                self.trace({"sample": r, "canvas": -1 if canvas is None else k, "phase": "encode",
                            "forward": "encoder", "tokens": n})
        return enc.cache

    def _canvas_positions(self, rows, k: int) -> torch.Tensor:
        """Position ids [G, L] of canvas k of `rows`: right after each row's prompt and earlier canvases."""
        L = self.cfg.block_length
        return torch.tensor([self.lens[r] + k * L for r in rows])[:, None] + torch.arange(L)[None]

    # ------------------------------------------------------------------ the loop
    def execute(self):
        e, L = self.e, self.cfg.block_length
        synchronize(e.device)
        t0 = time.perf_counter()
        live = list(range(self.B))
        cache = self._encode(live, None, None, 0)
        for k in range(self.n_canvases):
            emitted = self._canvas(live, cache, k)  # {row: [L] tokens}
            synchronize(e.device)
            now = time.perf_counter()
            going = []
            for r in live:
                toks = emitted[r].tolist()
                first = next((i for i, t in enumerate(toks) if t in e.eos_ids), None)
                if first is not None:
                    toks[first + 1:] = [e.pad_id] * (L - first - 1)
                self.out[r].extend(toks)
                if first is None and k + 1 < self.n_canvases:
                    going.append(r)
                else:
                    self.t_end[r] = now
            if going:
                if len(going) != len(live) and self.cfg.cache != "none":
                    cache = cache.select(torch.tensor([live.index(r) for r in going], device=e.device))
                canvas = torch.stack([emitted[r] for r in going])  # [G, L]
                cache = self._encode(going, cache, canvas, k)
            live = going
            if not live:
                break
        outs = []
        for r in range(self.B):
            toks = self.out[r]
            gen = next((i for i, t in enumerate(toks) if t in e.eos_ids), len(toks))
            outs.append(SampleOutput(tuple(toks), self.dec_nfe[r] + self.enc_nfe[r], 0, self.t_end[r] - t0, gen,
                                     len(toks), encoder_nfe=self.enc_nfe[r]))
        return outs

    def _canvas(self, rows: list[int], cache, k: int) -> dict[int, torch.Tensor]:
        """Denoise canvas k of `rows` (their cache rows in that order) until the decoder ends it."""
        e, dec, L, V = self.e, self.dec, self.cfg.block_length, self.V
        states = {}
        for r in rows:  # the canvas's uniform tokens: the first call on the sample's generator
            tokens = torch.randint(0, V, (1, L), generator=self.gens[r])[0]  # [L] CPU
            states[r] = BlockState(tokens, None, -1, k, self.sample_memory[r], self.n_canvases)
            states[r].response_offset = k * L
        carry: dict[int, torch.Tensor | None] = dict.fromkeys(rows)
        emitted: dict[int, torch.Tensor] = {}
        stepping = list(rows)
        while stepping:
            sub = cache if len(stepping) == len(rows) else cache.select(
                torch.tensor([rows.index(r) for r in stepping], device=e.device))
            canvas = torch.stack([states[r].tokens for r in stepping]).to(e.device)  # [G, L]
            sc = None if carry[stepping[0]] is None else torch.stack([carry[r] for r in stepping])  # [G, L, V]
            logits = self.model.decode(canvas, sub, self._canvas_positions(stepping, k).to(e.device), sc)  # [G, L, V]
            nxt = []
            for i, r in enumerate(stepping):
                st = states[r]
                self.dec_nfe[r] += 1
                st.logits = logits[i]
                if self.observe is not None:
                    self.observe(r, (k, st.step, "step"), {"logits": st.logits})
                plan = dec.step(st)
                check_plan(dec, plan, L, V)
                probs = torch.softmax(plan.sample.float(), dim=-1).cpu()  # [L, V] float32
                sampled = torch.multinomial(probs, num_samples=1, generator=self.gens[r]).view(L)
                redraw = torch.randint(0, V, (1, L), generator=self.gens[r])[0]  # always the whole canvas
                keep = plan.keep.cpu()
                top = plan.sample.argmax(dim=-1).cpu()  # [L]
                if self.trace is not None:
                    self.trace({**plan.info, "sample": r, "canvas": k, "step": st.step, "phase": "step",
                                "forward": "decoder", "input": st.tokens.tolist(), "argmax": top.tolist(),
                                "sampled": sampled.tolist(), "accepted": keep.nonzero().squeeze(-1).tolist(),
                                "redraw": redraw.tolist(), "end": bool(plan.end)})
                st.step += 1
                if plan.end:
                    emitted[r] = top
                    continue
                if st.step >= dec.max_canvas_forwards:
                    raise RuntimeError(f"decoder {dec.name!r} did not end canvas {k} within its "
                                       f"{dec.max_canvas_forwards} forwards")
                st.tokens = torch.where(keep, sampled, redraw)
                carry[r] = plan.carry
                nxt.append(r)
            if nxt and any(carry[r] is None for r in nxt) and not all(carry[r] is None for r in nxt):
                raise RippleError(f"decoder {dec.name!r} carried self-conditioning for some rows only")
            stepping = nxt
        return emitted
