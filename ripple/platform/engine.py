"""The denoising engine: canvas, semi-autoregressive block loop, KV cache policies, the
packed lookahead forward, NFE counting and decode timing. Decoders only decide.

Cache policies choose which canvas window a step recomputes; keys outside it come from
the block-opening forward (DESIGN.md section 3):
  none   -> [0, N)        nothing cached
  prefix -> [lo, N)       keys before the block reused (Fast-dLLM prefix cache)
  dual   -> [lo, hi)      prefix and suffix reused; only the block is recomputed
where [lo, hi) is the block window: the block, plus one position before it for
shifted-logit families (the prediction for position i is read at i-1).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..decoders.base import CACHE_POLICIES, BlockState, Commit, Lookahead, Plan, Scheduler
from ..errors import RippleError
from .models.transformer import KVCache

TraceFn = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class GenerationConfig:
    gen_length: int
    block_length: int
    cache: str = "none"
    stop_at_eos: bool = False  # stop after a block that committed EOS (earlier positions decoded)

    def __post_init__(self):
        if self.gen_length <= 0 or self.block_length <= 0:
            raise RippleError(f"gen_length and block_length must be positive, got {self.gen_length} and {self.block_length}")
        if self.gen_length % self.block_length:
            raise RippleError(
                f"gen_length {self.gen_length} is not divisible by block_length {self.block_length}; "
                f"accepted block lengths: {', '.join(str(d) for d in _divisors(self.gen_length))}"
            )
        if self.cache not in CACHE_POLICIES:
            raise RippleError(f"unknown cache policy {self.cache!r}; accepted: {', '.join(CACHE_POLICIES)}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class SampleOutput:
    tokens: tuple[int, ...]  # the gen_length response ids
    nfe: int
    lookahead_nfe: int  # of which packed lookahead forwards
    decode_seconds: float
    generated_tokens: int  # response tokens before the first end-of-sequence id
    gen_length: int

    @property
    def tps(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def canvas_tps(self) -> float:
        return self.gen_length / self.decode_seconds if self.decode_seconds > 0 else 0.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Engine:
    """Runs any decoder with any cache policy on a model with the DiffusionTransformer forward."""

    def __init__(self, model, *, mask_id: int, eos_ids: Sequence[int], pad_id: int,
                 max_positions: int | None = None, device: torch.device | str = "cpu"):
        self.model = model
        self.shift = int(getattr(model, "shift", 0))
        self.mask_id = int(mask_id)
        self.eos_ids = tuple(int(e) for e in eos_ids)
        self.pad_id = int(pad_id)
        self.max_positions = max_positions
        self.device = torch.device(device)

    @classmethod
    def from_loaded(cls, lm) -> "Engine":
        return cls(lm.model, mask_id=lm.mask_id, eos_ids=lm.eos_ids, pad_id=lm.pad_id,
                   max_positions=lm.max_positions, device=lm.device)

    # ------------------------------------------------------------------ generate
    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], decoder: Scheduler, config: GenerationConfig,
                 trace: TraceFn | None = None) -> list[SampleOutput]:
        if config.cache not in decoder.supported_caches:
            raise RippleError(
                f"decoder {decoder.name!r} does not support cache {config.cache!r}; "
                f"supported: {', '.join(decoder.supported_caches)}"
            )
        run = _Run(self, prompts, decoder, config, trace)
        return run.execute()

    # ------------------------------------------------------------------ forwards
    def forward_full(self, canvas, positions, pad, rows_n, logits_rows, store_kv):
        """Whole canvas, fresh: [B, N] -> logits [B, R, V] (and the KV cache)."""
        mask = None
        if pad.any():
            key_ok = ~pad  # [B, N]
            mask = key_ok[:, None, None, :] | pad[:, None, :, None]  # pad queries see everything
        out = self.model(canvas, positions, attn_mask=mask, return_kv=store_kv, logits_rows=logits_rows)
        return out.logits, out.kv

    def forward_window(self, canvas, positions, pad, kv: KVCache | None, w0: int, w1: int,
                       lo: int, hi: int, variants: torch.Tensor | None, logits_rows):
        """Recompute canvas window [w0, w1) (keys elsewhere from `kv`), plus packed variants.

        variants: [B, m, hi - lo] tokens of the block window for each variant.
        Returns logits [B, R, V] for `logits_rows` of the packed query sequence.
        """
        B, N = canvas.shape
        toks = canvas[:, w0:w1]  # [B, Tw]
        pos = positions[:, w0:w1]
        m = 0 if variants is None else variants.shape[1]
        Lw = hi - lo
        if m:
            toks = torch.cat((toks, variants.reshape(B, m * Lw)), dim=1)  # [B, Tw + m*Lw]
            pos = torch.cat((pos, positions[:, lo:hi].repeat(1, m)), dim=1)
        mask = None
        if m or pad.any():
            mask = self._mask(pad, w0, w1, lo, hi, m)
        if kv is None and (w0, w1) != (0, N):
            raise AssertionError("a partial window needs the block-opening KV cache")
        out = self.model(toks, pos, attn_mask=mask, kv=kv, window=(w0, w1) if kv is not None else None,
                         logits_rows=logits_rows)
        return out.logits

    def _mask(self, pad, w0, w1, lo, hi, m) -> torch.Tensor:
        """Visibility [B, 1, Tw + m*Lw, N + m*Lw] (True = may attend), DESIGN.md section 3."""
        B, N = pad.shape
        Tw, Lw = w1 - w0, hi - lo
        dev = pad.device
        key_ok = ~pad  # [B, N]
        base = key_ok[:, None, :].expand(B, Tw, N) | pad[:, w0:w1, None]  # [B, Tw, N]
        if not m:
            return base[:, None]
        # base queries never see variants
        top = torch.cat((base, torch.zeros(B, Tw, m * Lw, dtype=torch.bool, device=dev)), dim=2)
        # a variant sees the context minus the anchor's block window, plus its own copy
        ctx = key_ok.clone()
        ctx[:, lo:hi] = False
        own = torch.block_diag(*[torch.ones(Lw, Lw, dtype=torch.bool, device=dev)] * m)  # [m*Lw, m*Lw]
        bottom = torch.cat((ctx[:, None, :].expand(B, m * Lw, N), own[None].expand(B, -1, -1)), dim=2)
        return torch.cat((top, bottom), dim=1)[:, None]


class _Run:
    """State of one `generate` call: the canvas of a batch and per-row bookkeeping."""

    def __init__(self, engine: Engine, prompts, decoder: Scheduler, cfg: GenerationConfig, trace):
        self.e, self.decoder, self.cfg, self.trace = engine, decoder, cfg, trace
        if not prompts:
            raise RippleError("no prompts given")
        lens = [len(p) for p in prompts]
        if min(lens) < 1:
            raise RippleError("every prompt needs at least one token")
        P = max(lens)
        self.P, N = P, P + cfg.gen_length
        longest = max(lens) + cfg.gen_length
        if engine.max_positions is not None and longest > engine.max_positions:
            raise RippleError(
                f"prompt ({max(lens)} tokens) plus gen_length ({cfg.gen_length}) = {longest} exceeds "
                f"the model's {engine.max_positions} positions"
            )
        B = len(prompts)
        dev = engine.device
        canvas = torch.full((B, N), engine.mask_id, dtype=torch.long)
        pad = torch.zeros(B, N, dtype=torch.bool)
        for b, p in enumerate(prompts):
            off = P - len(p)  # left padding keeps every block at the same canvas columns
            canvas[b, :off] = engine.pad_id
            pad[b, :off] = True
            canvas[b, off:P] = torch.as_tensor(list(p), dtype=torch.long)
        cols = torch.arange(N)[None].expand(B, N)
        offs = torch.tensor([P - n for n in lens])[:, None]
        self.canvas = canvas.to(dev)
        self.pad = pad.to(dev)
        self.positions = (cols - offs).clamp(min=0).to(dev)  # explicit position ids [B, N]
        self.B, self.N = B, N
        self.nfe = [0] * B
        self.look_nfe = [0] * B
        self.t_end = [0.0] * B
        self.stopped = [False] * B

    # one forward of `kind` over `rows` of the batch, counted for those rows
    def _count(self, rows: list[int], lookahead: bool = False) -> None:
        for r in rows:
            self.nfe[r] += 1
            if lookahead:
                self.look_nfe[r] += 1

    def execute(self) -> list[SampleOutput]:
        e, cfg = self.e, self.cfg
        L = cfg.block_length
        _sync(e.device)
        t0 = time.perf_counter()
        for blk in range(cfg.gen_length // L):
            rows = [r for r in range(self.B) if not self.stopped[r]]
            if not rows:
                break
            self._decode_block(blk, rows)
            _sync(e.device)
            now = time.perf_counter()
            be = self.P + (blk + 1) * L
            for r in rows:
                self.t_end[r] = now
                if cfg.stop_at_eos and self._has_eos(r, be):
                    self.stopped[r] = True
                    self.canvas[r, be:] = e.eos_ids[0] if e.eos_ids else e.pad_id
        out = []
        for r in range(self.B):
            resp = self.canvas[r, self.P:].tolist()
            gen = next((i for i, t in enumerate(resp) if t in e.eos_ids), len(resp))
            out.append(SampleOutput(tuple(resp), self.nfe[r], self.look_nfe[r], self.t_end[r] - t0, gen, cfg.gen_length))
        return out

    def _has_eos(self, r: int, upto: int) -> bool:
        seg = self.canvas[r, self.P:upto]
        return any(bool((seg == t).any()) for t in self.e.eos_ids)

    def _decode_block(self, blk: int, rows: list[int]) -> None:
        e, cfg, dec = self.e, self.cfg, self.decoder
        L = cfg.block_length
        bs = self.P + blk * L
        be = bs + L
        lo, hi = bs - e.shift, be
        w0, w1 = {"none": (0, self.N), "prefix": (lo, self.N), "dual": (lo, hi)}[cfg.cache]
        idx = torch.tensor(rows, device=e.device)
        sub = lambda t: t if len(rows) == self.B else t[idx]  # noqa: E731
        # block-opening forward: predictions for [bs, be) are read at rows [lo, lo + L)
        logits, kv = e.forward_full(sub(self.canvas), sub(self.positions), sub(self.pad), len(rows),
                                    torch.arange(lo, lo + L, device=e.device), cfg.cache != "none")
        self._count(rows)
        states = {r: BlockState(self.canvas[r, bs:be], logits[i], e.mask_id, blk) for i, r in enumerate(rows)}
        row_pos = {r: i for i, r in enumerate(rows)}
        base_rows = torch.arange(lo - w0, lo - w0 + L, device=e.device)
        max_steps = 4 * L + 16
        while True:
            active = [r for r in rows if bool(states[r].masked.any())]
            if not active:
                return
            normal, look, plans = [], [], {}
            for r in active:
                st = states[r]
                if st.step >= max_steps:
                    raise RuntimeError(f"decoder {dec.name!r} made no progress in block {blk} after {max_steps} steps")
                plan = dec.step(st)
                self._apply(r, st, plan.commit, plan.remask)
                plans[r] = plan
                still = bool(st.masked.any())
                self._emit(r, blk, st, plan.commit, plan.info, "lookahead" if (still and plan.variants is not None) else ("normal" if still else None))
                st.step += 1
                if still:
                    (look if plan.variants is not None else normal).append(r)
            sel = lambda rs: torch.tensor([row_pos[r] for r in rs], device=e.device)  # noqa: E731
            if normal:
                s = sel(normal)
                part = lambda t: t if len(normal) == self.B else t[torch.tensor(normal, device=e.device)]  # noqa: E731
                new = e.forward_window(part(self.canvas), part(self.positions), part(self.pad),
                                       None if kv is None else (kv if len(normal) == len(rows) else kv.select(s)),
                                       w0, w1, lo, hi, None, base_rows)
                self._count(normal)
                for i, r in enumerate(normal):
                    states[r].logits = new[i]
            if look:
                self._lookahead(look, states, plans, kv, sel(look), rows, w0, w1, lo, hi, base_rows, blk)

    def _lookahead(self, look, states, plans, kv, s, rows, w0, w1, lo, hi, base_rows, blk):
        e, L = self.e, self.cfg.block_length
        m = max(plans[r].variants.shape[0] for r in look)
        Lw = hi - lo
        var = []
        for r in look:
            v = plans[r].variants.to(e.device)  # [m_r, L]
            if v.shape[0] < m:  # pad with copies of the anchor block; their logits are ignored
                v = torch.cat((v, states[r].tokens[None].expand(m - v.shape[0], L)), dim=0)
            head = self.canvas[r, lo:lo + e.shift][None].expand(m, e.shift)  # shifted families: one position before
            var.append(torch.cat((head, v), dim=1))  # [m, Lw]
        variants = torch.stack(var)  # [B', m, Lw]
        part_idx = torch.tensor(look, device=e.device)
        Tw = w1 - w0
        var_rows = (Tw + torch.arange(m, device=e.device)[:, None] * Lw + torch.arange(L, device=e.device)[None]).reshape(-1)
        out = e.forward_window(self.canvas[part_idx], self.positions[part_idx], self.pad[part_idx],
                               None if kv is None else (kv if len(look) == len(rows) else kv.select(s)),
                               w0, w1, lo, hi, variants, torch.cat((base_rows, var_rows)))
        self._count(look, lookahead=True)
        for i, r in enumerate(look):
            st, plan = states[r], plans[r]
            m_r = plan.variants.shape[0]
            res = self.decoder.resolve(st, plan, Lookahead(out[i, :L], out[i, L:].reshape(m, L, -1)[:m_r]))
            self._apply(r, st, res.commit, None)
            st.logits = res.logits
            self._emit(r, blk, st, res.commit, res.info, None, phase="resolve")

    def _apply(self, r: int, st: BlockState, commit: Commit, remask) -> None:
        """Write a decoder's commits into the canvas, checking the protocol's invariants."""
        e = self.e
        if len(commit):
            pos = commit.positions.to(st.tokens.device)
            tok = commit.tokens.to(st.tokens.device)
            L = st.tokens.shape[0]
            if bool(((pos < 0) | (pos >= L)).any()):
                raise RuntimeError(f"decoder {self.decoder.name!r} committed outside the current block")
            if not bool(st.masked[pos].all()):
                raise RuntimeError(f"decoder {self.decoder.name!r} committed an already decoded position")
            if bool((tok == e.mask_id).any()):
                raise RuntimeError(f"decoder {self.decoder.name!r} committed the mask id")
            st.tokens[pos] = tok
        if remask is not None and remask.numel():
            st.tokens[remask.to(st.tokens.device)] = e.mask_id

    def _emit(self, r, blk, st, commit: Commit, info, forward, phase="step") -> None:
        if self.trace is None:
            return
        offset = blk * self.cfg.block_length
        self.trace({
            "sample": r, "block": blk, "step": st.step, "phase": phase,
            "committed": [[offset + int(p), int(t)] for p, t in zip(commit.positions.tolist(), commit.tokens.tolist())],
            "forward": forward, **info,
        })
