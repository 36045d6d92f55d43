"""The denoising engine: canvas, semi-autoregressive block loop, NFE counting and decode timing.
Decoders only decide. `_Run` keeps the block loop and each row's bookkeeping; its rooms:
  caches/       KV cache policies (none, prefix, dual), one module each, chosen by name: the window
                a step recomputes, the block opening's keys (prefill, finished blocks), sub-block spans
  visibility.py the masks of a forward and its segments (also training's)
  segments.py   a step's packed forward: where the window's and each segment's rows sit
  plans.py      applying a decision: protocol checks, commits, edits, remasks, end-of-sequence stops
  auxiliary.py  models a decoder declares beside the dLLM, handed back by role and counted apart

Cache policies choose which canvas window a step recomputes; keys outside it come from
the block-opening forward (DESIGN.md section 3; caches/__init__.py has the table).
The window starts at the block start for every family. A shifted-logit family (Dream:
the prediction for position i is read at i-1) would need the row before the block to
predict the block's first position, so its family declares `opening_commit`: the
block-opening forward commits that position with its top-1 token (mask id excluded), as
Fast-dLLM's Dream generation does, and the decoder's first step runs on the logits of the
forward after it. No later forward needs the earlier row; the committed position keeps
the opening forward's prediction as its row in every later `BlockState.logits`. Both
forwards count towards NFE. A decoder that declares `decides_first_position` (ParallelBench's
Dream loop) gets no opening commit where the window holds the row before the block (cache
`none`: the whole canvas): its first step reads the opening forward, and every later forward
reads the block's predictions from the row before the block on (`commits_at_opening`).

A step's forward may carry extra segments after the window, as the decoder declares:
  variants  packed lookahead copies of the block (visibility rule of DESIGN.md 3): a
            variant sees what a block query sees, with its own copy in place of the block;
  shadow    one all-mask copy of the block for leave-one-out verification (WINO):
            shadow row t computes the prediction for block position j = t + shift and
            sees every context key a block query sees except the canvas token at j, plus
            the whole shadow (so j appears to it as a mask). Positions a shifted family
            committed at the opening have no shadow row and are never verified;
  beyond    for decoders with `needs_rows_beyond_block` (KLASS), the next block's
            distributions: plain rows of the window where it covers them (none, prefix),
            otherwise (dual) a copy of the next block that sees what a block query sees,
            with its own copy in place of the next block.
Base queries never see a segment and segments never see each other. Keys outside the
recomputed window come from the block-opening cache for all of them, so the rules hold
unchanged under every cache policy. Decoders that declare nothing pay nothing: their
forwards compute exactly the block's rows.
After a packed lookahead the decoder's `resolve` hands the next step the rows it picks (a variant's
or the anchor's: no forward between), or none (`Resolution.logits` None, RPS's `carry=false`): the
row then gets a normal forward over the canvas with the resolve's commit written, one for every
such row of the step, before its next step, and the resolve's trace event names that forward.

Block-diffusion families (LLaDA2: the model declares `block_causal`) change the layout,
not the decoders: blocks are aligned to absolute position 0, so each row's left padding is a
whole number of blocks and the first decoded block may hold the prompt's tail (marked in
`BlockState.fixed`, never decoded nor remasked); a forward sees the canvas only up to the
current block's end (the extent), with block-causal attention by position ids (query i sees
key j iff pos_j // B <= pos_i // B); a row decodes ceil((P + G) / B) - P // B blocks, the last
one in full even past P + G (those positions are decoded, then cut from the output), so G need
not be a multiple of B (`GenerationConfig.block_aligned`). With
the extent ending at the block, `prefix` recomputes [bs, be) with finished blocks' keys from
the block-opening forward, made after their last commit, so it is exact, and `dual` is the
same window; the opening itself recomputes only the previous block (finished since the last
opening) and the current one, with the keys of earlier blocks from the previous opening. A family that `stops_at_eos` ends a row after a block that leaves an EOS in its
response, whatever `stop_at_eos` says. `eos_early_stop` (any family) also ends a row right
after a decision that committed an EOS when no mask lies between the response start and the
first EOS (LLaDA2's `eos_early_stop`: same tokens up to that EOS, fewer forwards).

A block-diffusion family may also shift its logits (Fast-dLLM v2: the row at position i predicts
i + 1 inside a block too): its block opening then reads the previous block's last row, which the
opening recomputes after that block's last commit, and commits the block's first position with it
(the reference's block-closing forward, or its prefill when the prompt ends on a block boundary); a
block that starts with the prompt's tail has nothing to open. A family that `prefills_prompt_blocks`
runs, under a cache, a forward of its own over the prompt's whole blocks before the first block
opens (the reference's prefill): the opening then computes the block against their keys, or, when
the block starts with a mask, opens from that forward's last row. A family that `eos_stops_mid_block`
ends a row under `stop_at_eos` as soon as its response holds an EOS with no mask before it, checked
after every decision (the opening commit included).

Sub-blocks (`GenerationConfig.sub_block_length`, shorter than the block): a row's decisions stay in
the current sub-block (`BlockState.window`), which moves left to right to the next one holding a
mask once it has none (or its decoder deferred it); forwards still cover the cache policy's window,
except that `dual` may recompute the sub-block alone (caches/dual.py says when, and which keys it reads).

Uniform-noise families (DiffusionGemma: the model declares `noise = "uniform"`) have no masks and
no block loop of this kind: `generate` refuses a decoder whose declared `noise` differs from the
model's, in one line naming what the model needs, and hands a uniform-noise model to the renoising
loop (ripple/platform/runtime/renoising.py), which owns each sample's random generator.

A decoder that declares `cuts_canvas` (Learn2PD's end-of-text prediction) may end a row's canvas for
good (`Plan.truncate`): the columns from the cut on become padding, every later forward of the row
covers the canvas only up to the cut (forwards group rows by their canvas end, so a batch computes
what single runs do), later blocks cover what is left, and the response is the shorter canvas. Under
`dual` the block's remaining forwards keep reading the keys its opening cached, the removed columns'
included, and the block's own cached keys are rewritten after every forward (as Fast-dLLM's dual
cache does in place), so positions past a cut read the last forward's keys. A decoder whose
configuration reads `rows_to_end` also gets the logits of the positions after the block up to the
canvas end from every forward whose window reaches them (`BlockState.rest`).

A decoder that declares `follows_reference` (the oracle) is run after the decoder it follows, on the
same prompts and settings (reference.py): its block states carry that decoder's tokens, its NFE and
clock count its own run only, and `SampleOutput.reference_nfe` the followed decoder's forwards.

`trace` receives every decision as a JSON-able event; `observe` (diagnostics, e.g. the
batch-equivalence check) also receives the tensors each decision reads, under the same
(block, step, phase) key as its trace event.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import torch

from ...decoders.base import BlockState, Commit, Lookahead, RunShape, Scheduler, greedy
from ...errors import RippleError
from .auxiliary import Counted, models_for
from .caches import NO_NARROWING, POLICIES, Window, cache_policy
from .models.transformer import KVCache
from .generation import GenerationConfig, indivisible  # noqa: F401  (GenerationConfig: imported from here too)
from .output import SampleOutput, synchronize  # noqa: F401  (their home; imported from here too)
from .plans import EosStops, apply_decision, check_plan
from .reference import Reference, follow
from .segments import pack
from .renoising import RenoisingRun
from .tracing import read_keys, token_probs
from .visibility import forward_mask

TraceFn = Callable[[dict[str, Any]], None]
# observe(row, (block, step, phase), tensors): the logits a decision reads, before it is taken.
# Tensors are live engine state: an observer that keeps them must copy them.
ObserveFn = Callable[[int, tuple[int, int, str], dict[str, torch.Tensor]], None]


class Engine:
    """Runs any decoder with any cache policy on a model with the DiffusionTransformer forward."""

    def __init__(self, model, *, mask_id: int, eos_ids: Sequence[int], pad_id: int,
                 max_positions: int | None = None, device: torch.device | str = "cpu", model_dir: str | None = None,
                 auxiliary: Mapping[str, Any] | None = None, family: str | None = None):
        self.model = model
        # the kind of family (ripple/platform/runtime/models/family.py): a decoder must declare the same.
        # Only a family's "uniform" counts: a model attribute called `noise` may be anything else
        self.noise = "uniform" if getattr(model, "noise", "mask") == "uniform" else "mask"
        self.family = family or str(getattr(model, "family", "this model"))  # a loaded model's: its family's name
        self.shift = int(getattr(model, "shift", 0))
        # a shifted family must commit the block's first position at the opening (module docstring)
        self.opening_commit = bool(getattr(model, "opening_commit", self.shift > 0))
        if self.shift not in (0, 1) or (self.shift and not self.opening_commit):
            raise RippleError(f"logit shift {self.shift} needs a model family with opening_commit; supported shifts: 0, 1")
        self.block_causal = bool(getattr(model, "block_causal", False))  # block diffusion (module docstring)
        self.stops_at_eos = bool(getattr(model, "stops_at_eos", False))
        self.eos_stops_mid_block = bool(getattr(model, "eos_stops_mid_block", False))
        self.prefills_prompt_blocks = bool(getattr(model, "prefills_prompt_blocks", False))
        if mask_id is None and self.noise == "mask":
            raise RippleError(f"{self.family} is a mask-noise family but no mask id was given")
        self.mask_id = -1 if mask_id is None else int(mask_id)  # -1: a uniform-noise family has none
        # the ids that end a response (stops, "generated tokens"): a loaded model's are its family's
        # declared stop ids (`Family.stop_ids`), so a token the family's reference treats as text never stops it
        self.eos_ids = tuple(int(e) for e in eos_ids)
        self.pad_id = int(pad_id)
        self.max_positions = max_positions
        self.device = torch.device(device)
        self.model_dir = model_dir  # where decoders find data shipped with the model (RunShape)
        # models loaded beside this one, by reference, for decoders that declare them (auxiliary.py)
        self.auxiliary: dict[str, Any] = dict(auxiliary or {})
        # the weights digest (loading.weights_digest) for decoders that declare `checks_weights`: whoever
        # took it sets it (a grid worker); otherwise it is taken from model_dir on first need
        self.weights: str | None = None

    @classmethod
    def from_loaded(cls, lm) -> "Engine":
        return cls(lm.model, mask_id=lm.mask_id, eos_ids=lm.eos_ids, pad_id=lm.pad_id,
                   max_positions=lm.max_positions, device=lm.device, model_dir=str(lm.path),
                   family=lm.model_type)  # (a loaded model's model_type is its family's name)

    # ------------------------------------------------------------------ generate
    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], decoder: Scheduler, config: GenerationConfig,
                 trace: TraceFn | None = None, observe: ObserveFn | None = None,
                 seeds: Sequence[int] | None = None) -> list[SampleOutput]:
        """Decode each prompt. `seeds`: one per prompt (default 0), the seed of the sample's own random
        generator; only decoders that draw use it (renoising, a configuration whose `draws`), greedy ones
        ignore it."""
        self._admit(decoder, config)
        if self.noise == "uniform":  # renoising: whole canvases of block_length (ripple/platform/runtime/renoising.py)
            if decoder.max_canvas_forwards < 1:
                raise RippleError(f"decoder {decoder.name!r} declares no bound on a canvas's forwards")
            seeds = [0] * len(prompts) if seeds is None else list(seeds)
            decoder.prepare(self._shape(config, [-(-config.gen_length // config.block_length)] * len(prompts), decoder))
            return RenoisingRun(self, prompts, decoder, config, seeds, trace, observe).execute()
        refs = follow(self, prompts, decoder, config, seeds) if decoder.follows_reference else None
        run = self.start(prompts, decoder, config, trace, observe, seeds, refs)
        outs = run.execute()
        return outs if refs is None else [replace(o, reference_nfe=f.nfe) for o, f in zip(outs, refs)]

    def start(self, prompts, decoder: Scheduler, config: GenerationConfig, trace, observe, seeds,
              reference: Sequence[Reference] | None = None) -> "_Run":
        """A mask-noise run, checked and prepared, before any forward (`reference`: the followed
        decoder's tokens per prompt, for a decoder that follows a reference)."""
        self._admit(decoder, config)
        if config.gen_length % config.block_length and not (self.block_causal or config.block_align == "absolute"):
            raise indivisible(config.gen_length, config.block_length)
        if decoder.decides_first_position and (decoder.uses_lookahead or decoder.uses_shadow):
            raise RippleError(f"decoder {decoder.name!r} declares decides_first_position with block copies "
                              "(lookahead or shadow): the engine supports one or the other")
        if decoder.needs_rows_beyond_block and decoder.rows_to_end:
            raise RippleError(f"decoder {decoder.name!r} asks for the next block's rows and the rows to the canvas "
                              "end: the engine supports one or the other")
        run = _Run(self, prompts, decoder, config, trace, observe, seeds, reference)
        decoder.prepare(self._shape(config, run.n_blocks, decoder))
        return run

    def _admit(self, decoder: Scheduler, config: GenerationConfig) -> None:
        """Refuse, in one line, a decoder made for another kind of family, a cache it does not support or
        a model it needs beside this one that the engine does not hold."""
        from ...decoders.registry import check_noise

        check_noise(decoder, self.family, self.noise)
        if config.cache not in decoder.supported_caches:
            raise RippleError(f"decoder {decoder.name!r} does not support cache {config.cache!r}; "
                              f"supported: {', '.join(decoder.supported_caches)}")
        models_for(decoder, self.auxiliary)

    def _shape(self, config: GenerationConfig, n_blocks: Sequence[int], decoder: Scheduler) -> RunShape:
        """What a decoder checks before the run (`Scheduler.prepare`)."""
        weights = self.weights
        if weights is None and decoder.checks_weights and self.model_dir:
            from .loading import weights_digest  # once per engine: it reads every weight byte
            from pathlib import Path

            try:
                weights = self.weights = weights_digest(Path(self.model_dir))
            except RippleError:
                weights = None  # a model built in memory (no weight files): nothing to compare with
        return RunShape(config.gen_length, config.block_length, tuple(n_blocks),
                        int(getattr(self.model, "vocab_size", 0)), self.mask_id, self.model_dir, self.shift,
                        cache=config.cache, eos_ids=self.eos_ids, weights=weights,
                        models=models_for(decoder, self.auxiliary), family=self.family)

    def commits_at_opening(self, decoder: Scheduler, cache: str) -> bool:
        """Whether a block opening commits the block's first position (module docstring): on a family that
        declares `opening_commit`, unless the decoder decides that position itself and the window holds
        the row before the block (cache none)."""
        return self.opening_commit and not (decoder.decides_first_position and POLICIES[cache].recomputes_context)

    # ------------------------------------------------------------------ forwards
    def forward_full(self, canvas, positions, pad, logits_rows, store_kv, block: int | None = None):
        """Whole canvas, fresh: [B, N] -> logits [B, R, V] (and the KV cache). `block`: the block
        length of a block-causal family's attention (None: bidirectional)."""
        N = canvas.shape[1]
        out = self.forward_window(canvas, positions, pad, None, 0, N, 0, 0, None, logits_rows, block=block,
                                  return_kv=store_kv)
        return out if store_kv else (out, None)

    def forward_window(self, canvas, positions, pad, kv: KVCache | None, w0: int, w1: int,
                       lo: int, hi: int, variants: torch.Tensor | None, logits_rows, shadow: bool = False,
                       beyond: tuple[int, int] | None = None, extent: int | None = None,
                       block: int | None = None, return_kv: bool = False):
        """Recompute canvas window [w0, w1) (keys elsewhere from `kv`), plus packed segments.

        The forward's canvas is columns [0, extent) (default: all); [lo, hi) is the block.
        variants: [B, m, hi - lo] tokens of the block for each variant.
        shadow: append the all-mask leave-one-out copy of the block after the variants.
        beyond: canvas columns [b0, b1) (the next block) to append as a copy after the shadow.
        block: block length of a block-causal family's attention (None: bidirectional).
        Returns logits [B, R, V] for `logits_rows` of the packed query sequence
        (window rows, then m * (hi - lo) variant rows, then hi - lo shadow rows, then b1 - b0),
        or (logits, KV cache of the canvas columns) with `return_kv`.
        """
        B = canvas.shape[0]
        N = canvas.shape[1] if extent is None else extent
        toks = canvas[:, w0:w1]  # [B, Tw]
        pos = positions[:, w0:w1]
        m = 0 if variants is None else variants.shape[1]
        Lw = hi - lo
        if m:
            toks = torch.cat((toks, variants.reshape(B, m * Lw)), dim=1)  # [B, Tw + m*Lw]
            pos = torch.cat((pos, positions[:, lo:hi].repeat(1, m)), dim=1)
        if shadow:
            toks = torch.cat((toks, torch.full((B, Lw), self.mask_id, dtype=toks.dtype, device=toks.device)), dim=1)
            pos = torch.cat((pos, positions[:, lo:hi]), dim=1)  # [B, Tw + m*Lw + Lw]
        if beyond is not None:
            b0, b1 = beyond
            toks = torch.cat((toks, canvas[:, b0:b1]), dim=1)  # [B, Tw + m*Lw + S + Lb]
            pos = torch.cat((pos, positions[:, b0:b1]), dim=1)
        if block is not None and w0 >= lo and N <= hi:
            block = None  # every query is in the last block of the canvas: block-causal sees all (SDPA unmasked)
        mask = None
        if m or shadow or beyond is not None or block is not None or bool(pad[:, :N].any()):
            mask = forward_mask(pad[:, :N], positions[:, :N], w0, w1, lo, hi, m, shadow, beyond, block, self.shift)
        if kv is None and (w0, w1) != (0, N):
            raise AssertionError("a partial window needs the block-opening KV cache")
        out = self.model(toks, pos, attn_mask=mask, kv=kv, window=(w0, w1) if kv is not None else None,
                         logits_rows=logits_rows, return_kv=return_kv)
        if not return_kv:
            return out.logits
        if kv is not None:  # the canvas's keys: cached outside the window, fresh inside
            return out.logits, kv.merge(out.kv, w0, w1, N)
        return out.logits, out.kv.truncate(N) if toks.shape[1] > N else out.kv  # the canvas's keys only


class _Run:
    """State of one `generate` call: the canvas of a batch and per-row bookkeeping."""

    def __init__(self, engine: Engine, prompts, decoder: Scheduler, cfg: GenerationConfig, trace, observe=None,
                 seeds: Sequence[int] | None = None, reference: Sequence[Reference] | None = None):
        self.e, self.decoder, self.cfg, self.trace, self.observe = engine, decoder, cfg, trace, observe
        self.reference = reference  # per row, the followed decoder's tokens (reference.py); None: none followed
        if not prompts:
            raise RippleError("no prompts given")
        lens = [len(p) for p in prompts]
        if min(lens) < 1:
            raise RippleError("every prompt needs at least one token")
        L, G, B = cfg.block_length, cfg.gen_length, len(prompts)
        if engine.block_causal or cfg.block_align == "absolute":
            # blocks aligned to position 0: left padding in whole blocks, so every row's first
            # decoded block (the one holding its prompt's end) sits at the same canvas columns
            first = max(n // L for n in lens)
            offs = [L * (first - n // L) for n in lens]
            self.n_blocks = [-(-(n + G) // L) - n // L for n in lens]
            self.origin = first * L
        else:
            P = max(lens)
            offs = [P - n for n in lens]  # left padding keeps every block at the same canvas columns
            self.n_blocks = [G // L] * B
            self.origin = P
        self.starts = [o + n for o, n in zip(offs, lens)]  # canvas column of each row's response
        self.lens = lens  # each row's prompt tokens
        N = self.origin + max(self.n_blocks) * L
        # past a row's end: padding. A block-diffusion family decodes its last block in full; a
        # full-attention family aligned to 0 cuts it at P + G (the canvas a full forward sees is P + G)
        if engine.block_causal or cfg.block_align != "absolute":
            ends = [self.origin + nb * L for nb in self.n_blocks]
        else:
            ends = [o + n + G for o, n in zip(offs, lens)]
        self.ends = ends
        longest = max(e - o for e, o in zip(ends, offs))
        if engine.max_positions is not None and longest > engine.max_positions:
            n = max(lens)
            rounded = f", in whole blocks of {L}," if longest > n + G else ""
            raise RippleError(
                f"prompt ({n} tokens) plus gen_length ({G}){rounded} = {longest} exceeds "
                f"the model's {engine.max_positions} positions"
            )
        dev = engine.device
        canvas = torch.full((B, N), engine.mask_id, dtype=torch.long)
        pad = torch.zeros(B, N, dtype=torch.bool)
        for b, p in enumerate(prompts):
            off, end = offs[b], ends[b]
            canvas[b, :off] = engine.pad_id
            canvas[b, end:] = engine.pad_id
            pad[b, :off] = True
            pad[b, end:] = True
            canvas[b, off:self.starts[b]] = torch.as_tensor(list(p), dtype=torch.long)
        cols = torch.arange(N)[None].expand(B, N)
        self.canvas = canvas.to(dev)
        self.pad = pad.to(dev)
        self.positions = (cols - torch.tensor(offs)[:, None]).clamp(min=0).to(dev)  # explicit position ids [B, N]
        self.B, self.N = B, N
        self.nfe = [0] * B
        self.look_nfe = [0] * B
        # the models the decoder declared beside this one, by role, and their forwards per row (auxiliary.py)
        self.models = models_for(decoder, engine.auxiliary)
        self.aux_nfe = {role: [0] * B for role in self.models}
        self.t_end = [0.0] * B
        self.edits = [0] * B
        # token editing (a decoder that declares `edits_tokens`, in a configuration that uses it): post
        # forwards after a block's last mask is filled, no mid-block end-of-sequence stop while tokens
        # may still be rewritten (module docstring)
        self.editing = decoder.edits_tokens and (decoder.may_edit or decoder.max_post_forwards > 0)
        self.sample_memory: list[dict] = [{} for _ in range(B)]  # decoder scratch per sample, across blocks
        # a configuration that draws: one CPU generator per sample, seeded with its seed (batch-independent)
        if seeds is not None and len(seeds) != B:
            raise RippleError(f"{len(seeds)} seeds for {B} prompts; give one seed per prompt")
        self.gens = [torch.Generator().manual_seed(int(s)) for s in (seeds or [0] * B)] if decoder.draws else [None] * B
        # the block opening commits its first position (shifted families), and so the block positions
        # whose rows later forwards keep: `head`; the rows read before the block: `back`
        self.opening = engine.commits_at_opening(decoder, cfg.cache)
        self.head = engine.shift if self.opening else 0
        self.back = engine.shift - self.head
        self.deferred: list[list[int]] = [[] for _ in range(B)]  # blocks a decoder ended with masks left
        # canvas column where row r's canvas now ends (a decoder that `cuts_canvas`); None: not cut
        self.limit: list[int | None] = [None] * B
        # rows that ended at an end-of-sequence id; decisions may end one mid-block under eos_early_stop, or a
        # family whose stop_at_eos ends a row at its EOS mid-block (Fast-dLLM v2's stop rule), unless tokens
        # may still be rewritten
        mid = cfg.stop_at_eos and engine.eos_stops_mid_block
        self.stops = EosStops(self.canvas, self.starts, engine.eos_ids, engine.mask_id, engine.pad_id,
                              (cfg.eos_early_stop or mid) and not (self.editing and decoder.may_edit), mid)
        # the cache policy: the windows of this run's forwards and the keys they keep (caches/)
        self.cache = cache_policy(cfg.cache)(self)

    @property
    def to_end(self) -> bool:
        """Forwards also compute the rows after the block (`BlockState.rest`): read after `prepare`."""
        return self.decoder.rows_to_end

    def count(self, rows: list[int], lookahead: bool = False) -> None:
        """One forward over `rows` of the batch, counted for those rows."""
        for r in rows:
            self.nfe[r] += 1
            if lookahead:
                self.look_nfe[r] += 1

    def execute(self) -> list[SampleOutput]:
        e, cfg = self.e, self.cfg
        L = cfg.block_length
        stop_at_eos = cfg.stop_at_eos or e.stops_at_eos
        synchronize(e.device)
        t0 = time.perf_counter()
        for blk in range(max(self.n_blocks)):
            rows = [r for r in range(self.B) if not self.stops.stopped[r] and blk < self.n_blocks[r]]
            if not rows:
                break
            self._decode_block(blk, rows)
            synchronize(e.device)
            now = time.perf_counter()
            be = self.origin + (blk + 1) * L
            for r in rows:
                self.t_end[r] = now
                if stop_at_eos and not self.stops.stopped[r] and self.stops.first_eos(r, be) is not None:
                    self.stops.stop(r, be)
        if any(self.deferred):
            self._fill_deferred()
            synchronize(e.device)
            now = time.perf_counter()
            for r in range(self.B):
                if self.deferred[r]:
                    self.t_end[r] = now
        out = []
        for r in range(self.B):
            end = self.starts[r] + cfg.gen_length
            if self.limit[r] is not None:  # a cut canvas: the response is what is left of it
                end = min(end, self.limit[r])
            resp = self.canvas[r, self.starts[r]:end].tolist()
            gen = next((i for i, t in enumerate(resp) if t in e.eos_ids), len(resp))
            out.append(SampleOutput(tuple(resp), self.nfe[r], self.look_nfe[r], self.t_end[r] - t0, gen, len(resp),
                                    self.edits[r], auxiliary_nfe=tuple((k, n[r]) for k, n in self.aux_nfe.items())))
        return out

    def _window(self, st: BlockState, leave: bool = False) -> tuple[int, int] | None:
        """The sub-block row `st` decides in next: the current one while it holds masks (`leave`: the
        decoder deferred it), else the next one that does; None when the block holds none."""
        L, S = st.tokens.shape[0], self.cfg.sub_block
        m = st.block_masked
        for a in range(st.window[1] if leave else st.window[0], L, S):
            if bool(m[a:a + S].any()):
                return a, a + S
        return None

    def _enter(self, st: BlockState, w: tuple[int, int] | None) -> None:
        """Move row `st` to sub-block `w`."""
        if w is not None and w != st.window:
            st.enter_sub_block(*w)

    def select(self, rows: list[int]):
        """Selector of `rows` from a batch tensor (no copy when every row takes part)."""
        if len(rows) == self.B:
            return lambda t: t
        idx = torch.tensor(rows, device=self.e.device)
        return lambda t: t[idx]

    def _decode_block(self, blk: int, rows: list[int]) -> None:
        e, cfg, dec = self.e, self.cfg, self.decoder
        L = cfg.block_length
        bs = self.origin + blk * L
        be = bs + L
        ext = be if e.block_causal else self.N  # a block-causal forward sees nothing after the block
        if any(self.limit[r] is not None for r in rows):  # cut canvases (`Plan.truncate`): the longest row's end
            ext = min(ext, max(ext if self.limit[r] is None else self.limit[r] for r in rows))
        nxt = dec.needs_rows_beyond_block and be < self.N  # the decoder reads the next block's rows
        win = Window(*self.cache.window(bs, be, ext), bs, be, {r: i for i, r in enumerate(rows)}, nxt, ext,
                     L if e.block_causal else None)
        # [G, L (+ L next block's, or the rows after the block to the canvas end), V] and the steps' keys
        logits, kv = self.cache.open(blk, rows, win)
        states = {}
        for i, r in enumerate(rows):
            st = self._state(r, blk, logits[i, :L])
            # a row's last block has no next block (in a batch its columns belong to longer rows)
            st.beyond = logits[i, L:] if nxt and blk + 1 < self.n_blocks[r] else None
            if self.to_end:
                self._rest(r, st, logits[i, L:], be, ext)
            self._enter(st, self._window(st))
            states[r] = st
            self.cache.opened(r, st)
        if self.opening:
            self._open(rows, states, kv, win, blk)
        max_steps = 4 * L + 16 + (dec.max_post_forwards if self.editing else 0)
        post = dict.fromkeys(rows, 0)  # post forwards run in this block (token editing)
        # a row steps while its block holds masks; an editing row also steps on a full block whose
        # distributions are fresh (a post forward's, or a lookahead's that filled the block)
        live = [r for r in rows if bool(states[r].block_masked.any())]
        while live:
            # (variants, shadow, extent or -1, the cache policy's narrower span or NO_NARROWING,
            #  the row's canvas end or -1) -> rows
            groups: dict[Kind, list[int]] = {}
            plans, stepping = {}, []
            for r in live:
                st = states[r]
                if not self.editing and not bool(st.block_masked.any()):
                    continue  # a lookahead's commit completed the block
                self._enter(st, self._window(st))
                if st.step >= max_steps:
                    raise RuntimeError(f"decoder {dec.name!r} made no progress in block {blk} after {max_steps} steps")
                if self.observe is not None:
                    self.observe(r, (blk, st.step, "step"),
                                 {k: v for k, v in (("logits", st.logits), ("beyond", st.beyond),
                                                    ("shadow", st.shadow)) if v is not None})
                filling = bool(st.block_masked.any())
                plan = dec.step(st)
                check_plan(dec, plan)
                edited = self._apply(r, st, plan.commit, plan.remask, plan.edit)
                if plan.truncate is not None:  # after the commits: a position committed and cut is gone
                    self._truncate(r, st, bs + plan.truncate, bs)
                self.stops.after_decision(r, plan.commit, be)
                plans[r] = plan
                deferring = plan.defer and bool(st.masked.any())
                if deferring and blk not in self.deferred[r]:  # masks left in the block: filled after the last block
                    self.deferred[r].append(blk)
                w = self._window(st, leave=deferring)  # a deferred sub-block is left with its masks
                go_on = w is not None or (self.editing and self._post_forward(r, post, filling, edited))
                kind = (plan.variants is not None, plan.shadow, -1 if plan.extent is None else plan.extent,
                        self.cache.narrow(r, st, plan, w), self._limit(r))
                self._emit(r, blk, st, plan.commit, plan.info, _forward_label(kind) if go_on else None,
                           remask=plan.remask, edited=edited, phase="step" if filling else "post")
                st.step += 1
                if deferring:
                    self._enter(st, w)
                if go_on:  # no forward once the block is complete
                    groups.setdefault(kind, []).append(r)
                    stepping.append(r)
            fresh = []  # rows whose resolve carried nothing: a normal forward gives their next step its rows
            for kind in sorted(groups):  # one forward per kind; each row is in exactly one
                fresh += self._forward(groups[kind], kind, states, plans, kv, win, blk)
            self._normal(fresh, states, kv, win, blk)
            live = stepping
        self.cache.closed(rows)  # the block is done: its cuts' columns leave the stored keys too (dual)

    def _limit(self, r: int) -> int:
        """Row r's canvas end column if a decoder cut it, else -1 (forwards group rows by it)."""
        return -1 if self.limit[r] is None else self.limit[r]

    def _truncate(self, r: int, st: BlockState, col: int, bs: int) -> None:
        """End row r's canvas before column `col` for good (`Plan.truncate`): the columns from it on hold
        padding, hidden from every later forward of the row (when, the cache policy says: `cut`), and later
        blocks cover what is left."""
        if col <= self.starts[r] or col <= bs:
            raise RuntimeError(f"decoder {self.decoder.name!r} cut the canvas before the current block")
        if col >= (self.ends[r] if self.limit[r] is None else self.limit[r]):
            return  # cuts only shorten
        self.limit[r] = self.ends[r] = col
        self.canvas[r, col:] = self.e.pad_id
        self.cache.cut(r, col)  # the columns become padding (under `dual` once the block is done)
        st.fixed[col - bs:] = True  # the block's positions past the cut (no candidates, never decoded)
        self.n_blocks[r] = min(self.n_blocks[r], -(-(col - self.origin) // self.cfg.block_length))

    def _rest(self, r: int, st: BlockState, rows: torch.Tensor, be: int, extent: int) -> None:
        """Hand row r's state the rows after its block up to its canvas end (`rows_to_end`): `rows` [n, V]
        are the forward's rows for columns be.. extent - 1 (none when its window did not reach them)."""
        end = min(extent, self.ends[r])
        if rows.shape[0] < end - be or end <= be:
            st.rest = st.rest_tokens = None
            return
        st.rest = rows[:end - be]
        st.rest_tokens = self.canvas[r, be:end]

    def _fill_deferred(self) -> None:
        """Blocks a decoder ended with masks left (`Plan.defer`, DUS's remasks), in block order: one
        forward each over the finished canvas (no cache: every key is fresh), whose top-1 tokens other
        than the mask id fill the block's masks. Later blocks decoded with those masks in place, as
        the reference did; the invariant that no mask is left holds at the end."""
        e, L, s = self.e, self.cfg.block_length, self.e.shift
        causal = L if e.block_causal else None
        for blk in sorted({b for blocks in self.deferred for b in blocks}):
            rows = [r for r in range(self.B) if blk in self.deferred[r]]
            bs = self.origin + blk * L
            be = bs + L
            ext = be if e.block_causal else self.N
            sub = self.select(rows)
            want = torch.arange(L, device=e.device) + bs - s
            logits = e.forward_window(sub(self.canvas), sub(self.positions), sub(self.pad), None, 0, ext, bs, be,
                                      None, want, extent=ext, block=causal)  # [G, L, V]
            self.count(rows)
            for i, r in enumerate(rows):
                st = self._state(r, blk, logits[i])
                tokens, _ = greedy(st)  # [L], never the mask id
                pos = st.masked.nonzero().squeeze(-1)
                commit = Commit(pos, tokens[pos])
                self._apply(r, st, commit, None, None)
                self._emit(r, blk, st, commit, {}, None, phase="fill")

    def _state(self, r: int, blk: int, logits: torch.Tensor) -> BlockState:
        """Row r's view of block `blk` with the block's logits [L, V]: the prompt's tail and the
        columns past the row's end are fixed (block-aligned layouts)."""
        L = self.cfg.block_length
        bs = self.origin + blk * L
        st = BlockState(self.canvas[r, bs:bs + L], logits, self.e.mask_id, blk, self.sample_memory[r],
                        self.n_blocks[r], self.gens[r])
        st.fixed[:max(0, self.starts[r] - bs)] = True  # the prompt's tail (block-aligned families)
        st.fixed[max(0, self.ends[r] - bs):] = True  # past the row's end (a last block cut short)
        st.response_offset = bs - self.starts[r]
        st.prompt_length = self.lens[r]
        st.context = self.canvas[r, self.starts[r] - self.lens[r]:bs]
        if self.reference is not None:
            st.reference = self.reference[r].block(st.response_offset, L, self.e.device)
        if self.models:
            st.models = {role: Counted(m, self.aux_nfe[role], r) for role, m in self.models.items()}
        return st

    def _post_forward(self, r: int, post: dict, filling: bool, edited: list) -> bool:
        """Token editing: after a step that left row r's block without masks, whether to run a post
        forward. A post step that edited nothing ends the block; otherwise at most the decoder's
        `max_post_forwards` post forwards run per block (LLaDA2.1's `max_post_steps`)."""
        if not filling and not edited:
            return False
        post[r] += 1
        return post[r] <= self.decoder.max_post_forwards

    def _open(self, rows: list[int], states, kv, win: Window, blk: int) -> None:
        """Commit each row's first block position with its top-1 token from the block-opening
        forward (Fast-dLLM's Dream generation), then run the forward the decoder's first step reads."""
        group = []
        for r in rows:
            st = states[r]
            if not bool(st.block_masked[0]):  # the block starts with the prompt's tail: nothing to open
                continue
            if self.observe is not None:
                self.observe(r, (blk, st.step, "open"), {"logits": st.logits})
            tokens, _ = greedy(st)  # [L], never the mask id
            commit = Commit(torch.zeros(1, dtype=torch.long), tokens[:1])
            self._apply(r, st, commit, None, None)
            st.fixed[0] = True
            self.stops.after_decision(r, commit, win.hi)
            still = bool(st.block_masked.any())
            self._emit(r, blk, st, commit, {}, "normal" if still else None, phase="open")
            if still:
                group.append(r)
        self._normal(group, states, kv, win, blk)

    def _normal(self, group: list[int], states, kv, win: Window, blk: int) -> None:
        """A normal forward for `group`'s rows, one per canvas end (rows grouped as a step's are)."""
        for lim in sorted({self._limit(r) for r in group}):
            self._forward([r for r in group if self._limit(r) == lim], NORMAL[:-1] + (lim,), states, {}, kv, win, blk)

    def _forward(self, group: list[int], kind: Kind, states, plans, kv, win: Window, blk: int) -> list[int]:
        """One forward for `group`'s rows: the window plus the segments their plans declared. Returns the
        rows whose resolve carried no distributions and that step again: they need a normal forward."""
        e, s = self.e, self.head  # s: block positions committed at the opening
        looks, shadow, cut, sub, lim = kind
        pick = self.select(group)
        master, kv = kv, self.cache.keys_for(kv, group, win)  # the block's stored keys, and `group`'s
        if sub != NO_NARROWING:  # the policy recomputes a narrower span (dual's sub-blocks)
            self.cache.forward_narrow(group, sub, states, kv, win)
            return []
        refresh = self.cache.prepare_forward(group, cut)  # this forward also refreshes the stored block keys
        if cut >= 0:  # a shortened canvas (`Plan.extent`): columns [0, lo + cut); nothing after it exists
            end = min(win.extent, win.lo + cut)
            win = replace(win, w1=min(win.w1, end), extent=end, next=False)
            kv = kv.truncate(end) if kv is not None else None
        if lim >= 0:  # a cut canvas (`Plan.truncate`): the policy's window ends at the cut
            win, kv = self.cache.cut_window(win, kv, lim)
        pk = pack(group, plans, states, win, s, self.back, e.shift, looks, shadow, e.device, self.to_end)
        out = e.forward_window(pick(self.canvas), pick(self.positions), pick(self.pad), kv, win.w0, win.w1,
                               win.lo, win.hi, pk.variants, pk.rows, shadow=shadow, beyond=pk.beyond,
                               extent=win.extent, block=win.causal,
                               return_kv=refresh)  # [G, n * (1 + m + shadow) + L * next, V]
        if refresh:
            out, keys = out
            self.cache.refresh(master, keys, group, win)
        self.count(group, lookahead=looks)
        fresh = []
        for i, r in enumerate(group):
            st, plan = states[r], plans.get(r)
            anchor, var, st.shadow, beyond = pk.read(out[i], st.logits, plan.variants.shape[0] if looks else 0)
            st.beyond = beyond if st.block_index + 1 < self.n_blocks[r] else None
            if self.to_end:
                self._rest(r, st, pk.rest_rows(out[i]), win.hi, win.extent)
            if not looks:
                st.logits = anchor
                continue
            if self.observe is not None:
                self.observe(r, (blk, st.step, "resolve"), {"anchor": anchor, "variants": var})
            res = self.decoder.resolve(st, plan, Lookahead(anchor, var))
            self._apply(r, st, res.commit, None, None)
            # nothing carried: the anchor's rows stand until the normal forward the next step reads
            st.logits = anchor if res.logits is None else res.logits
            self.stops.after_decision(r, res.commit, win.hi)
            # the row steps again while its block holds masks (an editing row also on a full block)
            refresh = res.logits is None and (self.editing or bool(st.block_masked.any()))
            if refresh:
                fresh.append(r)
            self._emit(r, blk, st, res.commit, res.info, _forward_label(NORMAL) if refresh else None,
                       phase="resolve", read=(anchor, var))
        return fresh

    def _apply(self, r: int, st: BlockState, commit: Commit, remask, edit: Commit | None) -> list[list[int]]:
        """Write a decision into row r's block (plans.py checks it), counting its edits; returns them."""
        edited = apply_decision(self.decoder, self.e.mask_id, st, commit, remask, edit)
        self.edits[r] += len(edited)
        return edited

    def _emit(self, r, blk, st, commit: Commit, info, forward, phase="step", remask=None, edited=None,
              read: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """One decision as a trace event. `nfe` names the forward whose outputs it read (the row's
        forwards so far: a step after a lookahead reads that lookahead's carried rows), `p` the
        probability those outputs gave each committed token; `read`: a resolve's (anchor [L, V],
        variants [m, L, V]), which its commits read and whose carried rows `variant` names
        (ripple/platform/runtime/tracing.py turns the events into a sample's stored trace)."""
        if self.trace is None:
            return
        offset = st.response_offset  # positions from the response start
        event = {  # a decoder's own info never overrides the engine's keys
            **info, "sample": r, "block": blk, "step": st.step, "phase": phase,
            "committed": [[offset + int(p), int(t)] for p, t in zip(commit.positions.tolist(), commit.tokens.tolist())],
            "forward": forward, "nfe": self.nfe[r], **read_keys(st.logits, commit, read),
        }
        if self.cfg.sub_block < self.cfg.block_length:
            event["sub_block"] = st.window[0] // self.cfg.sub_block
        if remask is not None and remask.numel():
            event["remasked"] = [offset + int(p) for p in remask.tolist()]
        if edited:
            event["edited"] = [[offset + p, old, new] for p, old, new in edited]
            event["p_edit"] = token_probs(st.logits, *(torch.tensor(c) for c in list(zip(*edited))[::2]))
        self.trace(event)


# a step forward's kind, its rows' grouping key: (variants, shadow, shortened canvas's extent or -1, the cache
# policy's narrower span or NO_NARROWING, the rows' canvas end after a cut or -1)
Kind = tuple[bool, bool, int, tuple[int, int], int]
NORMAL: Kind = (False, False, -1, NO_NARROWING, -1)  # no variants, no shadow, the whole canvas and window


def _forward_label(kind: Kind) -> str:
    looks, shadow = kind[:2]
    return ("lookahead+shadow" if shadow else "lookahead") if looks else ("shadow" if shadow else "normal")
