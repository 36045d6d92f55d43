"""Ripple's public test kit, for its own suite and for plugins' (docs/adding-a-decoder.md).

- `ScriptedModel`: a scripted stand-in for the model, for decoder-logic tests. It speaks the
  DiffusionTransformer forward protocol (window, KV cache, attention mask, logits rows) but its
  "keys" are the tokens themselves, so a query's logits are a function the test controls of (its
  position, the (position, token) pairs it can see). A stale cache therefore behaves like a real
  stale cache, and the packed lookahead's visibility rule is observable.
- `check_decoder` / `check_decoder_on_model`: the properties every decoder must satisfy (DESIGN.md
  section 4) on the scripted families or on a loaded checkpoint: every block ends unmasked, no mask
  id is committed, commits and edits only in the current block, NFE equals the forwards run,
  determinism, a batch equals single runs, and prefix/dual equal none in tokens where the family's
  cache is exact. `check_invariants` checks one decoded sample from its trace.
  `check_renoising_decoder` is the same for a uniform-noise decoder on a renoising checkpoint.
- `check_follower`: a decoder that follows a reference (the oracle) writes the followed decoder's tokens,
  its NFE apart from the reference run's (`reference_nfe`).
- `compare_trajectories`: a case list in the golden files' format against `ripple.generate`.
A failed check raises AssertionError saying what broke.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable

import torch

Script = Callable[[int, tuple[tuple[int, int], ...]], torch.Tensor]


@dataclass
class TokenCache:
    tokens: torch.Tensor  # [B, N]
    positions: torch.Tensor  # [B, N]

    def select(self, rows):
        return TokenCache(self.tokens[rows], self.positions[rows])

    def truncate(self, n):
        return TokenCache(self.tokens[:, :n], self.positions[:, :n])

    def overwrite(self, rows, fresh, lo, hi):
        self.tokens[rows, lo:hi] = fresh.tokens[:, lo:hi]
        self.positions[rows, lo:hi] = fresh.positions[:, lo:hi]

    def merge(self, fresh, w0, w1, n):
        def cat(old, new):
            return torch.cat((old[:, :w0], new[:, :w1 - w0], old[:, w1:n]), dim=1)

        return TokenCache(cat(self.tokens, fresh.tokens), cat(self.positions, fresh.positions))


@dataclass
class _Out:
    logits: torch.Tensor
    kv: TokenCache | None


def hashed_script(vocab: int, scale: float = 4.0, seed: int = 0) -> Script:
    """Deterministic pseudo-random logits that depend on everything a query sees."""

    def script(pos, visible):
        h = hashlib.sha256(repr((seed, pos, visible)).encode()).digest()
        g = torch.Generator().manual_seed(int.from_bytes(h[:8], "little"))
        return torch.randn(vocab, generator=g) * scale

    return script


class ScriptedModel:
    def __init__(self, vocab: int, script: Script, shift: int = 0, block_causal: bool = False):
        self.vocab_size = vocab
        self.script = script
        self.shift = shift
        self.block_causal = self.stops_at_eos = block_causal  # a block-diffusion family (LLaDA2's rules)
        self.calls = 0  # forward calls
        self.row_calls = 0  # sum over calls of batch rows
        self.logits_rows: list[int] = []  # per call: the query rows projected to logits

    def __call__(self, tokens, positions, attn_mask=None, kv=None, window=None, return_kv=False, logits_rows=None):
        self.calls += 1
        B, T = tokens.shape
        self.row_calls += B
        if kv is not None:
            w0, w1 = window
            n = w1 - w0
            key_tok = torch.cat((kv.tokens[:, :w0], tokens[:, :n], kv.tokens[:, w1:], tokens[:, n:]), 1)
            key_pos = torch.cat((kv.positions[:, :w0], positions[:, :n], kv.positions[:, w1:], positions[:, n:]), 1)
        else:
            key_tok, key_pos = tokens, positions
        rows = range(T) if logits_rows is None else [int(r) for r in logits_rows]
        self.logits_rows.append(len(rows))
        out = torch.empty(B, len(rows), self.vocab_size)
        # plain lists: reading a tensor element by element costs far more than the script itself
        for b in range(B):
            keys = list(zip(key_pos[b].tolist(), key_tok[b].tolist()))  # (position, token) per key
            query_pos = positions[b].tolist()
            if attn_mask is None:
                every = tuple(sorted(keys))  # every query sees every key
            else:
                vis_rows = attn_mask[b, 0]  # [T, S]
                vis_rows = (vis_rows if vis_rows.dtype == torch.bool else vis_rows == 0).tolist()
            for j, q in enumerate(rows):
                if attn_mask is None:
                    seen = every
                else:
                    seen = tuple(sorted(k for k, v in zip(keys, vis_rows[q]) if v))
                out[b, j] = self.script(query_pos[q], seen)
        cache = TokenCache(tokens.clone(), positions.clone()) if return_kv else None
        return _Out(out, cache)


def peaked(vocab: int, token: int, p: float, runner_up: int | None = None, floor: float = -30.0) -> torch.Tensor:
    """Logits [V] whose softmax puts (almost exactly) p on `token` and 1 - p on `runner_up`."""
    logits = torch.full((vocab,), floor)
    logits[token] = math.log(p)
    logits[token + 1 if runner_up is None else runner_up] = math.log(1.0 - p)
    return logits


def spread(vocab: int, token: int, p: float) -> torch.Tensor:
    """Logits [V] whose softmax puts p on `token` and spreads 1 - p evenly over the rest."""
    logits = torch.full((vocab,), math.log((1.0 - p) / (vocab - 1)))
    logits[token] = math.log(p)
    return logits


def view(seen: tuple[tuple[int, int], ...], mask_id: int) -> tuple[dict[int, int], bool]:
    """The canvas as a query sees it ({position: token}) and whether the query is a shadow row.

    A shadow row sees the block twice (the canvas and the all-mask shadow), so positions
    repeat; where they do, the canvas token wins, so its own hidden position reads as masked.
    """
    canvas: dict[int, int] = {}
    for p, t in seen:
        if t != mask_id or p not in canvas:
            canvas[p] = t
    return canvas, len(canvas) < len(seen)


# ---------------------------------------------------------------------------- decoder invariants
SCRIPTED_VOCAB, SCRIPTED_MASK, SCRIPTED_EOS = 40, 39, 1
SCRIPTED_PROMPTS = ([5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19])
FAMILIES = ("full", "shifted", "block_causal")  # LLaDA-like, Dream-like, LLaDA2/SDAR-like


def mask_loving_script(vocab: int = SCRIPTED_VOCAB, mask_id: int = SCRIPTED_MASK) -> Script:
    """Hashed logits, but the mask id is the top-1 at every other position: a decoder must never commit it."""
    base = hashed_script(vocab)

    def script(pos, seen):
        logits = base(pos, seen)
        if pos % 2 == 0:
            logits[mask_id] = logits.max() + 5.0
        return logits

    return script


def scripted_engine(family: str = "full", script: Script | None = None):
    """(Engine, ScriptedModel) for one of `FAMILIES`."""
    from .platform.runtime.engine import Engine

    if family not in FAMILIES:
        raise ValueError(f"unknown scripted family {family!r}; accepted: {', '.join(FAMILIES)}")
    model = ScriptedModel(SCRIPTED_VOCAB, script or mask_loving_script(), shift=int(family == "shifted"),
                          block_causal=family == "block_causal")
    return Engine(model, mask_id=SCRIPTED_MASK, eos_ids=[SCRIPTED_EOS], pad_id=0), model


class CountedModel:
    """A loaded model that counts its forward calls (the engine reads its family facts through it)."""

    def __init__(self, model):
        self.model, self.calls = model, 0

    def __getattr__(self, name):  # every family property (shift, block_causal, ...) is the model's
        return getattr(self.model, name)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.model(*args, **kwargs)


def check_invariants(out, events, calls, *, blocks, block_length, shift, mask=SCRIPTED_MASK, lead=0,
                     max_blocks=None, eos=(SCRIPTED_EOS,), idle_steps=False, sub_block_length=None,
                     cut=False) -> None:
    """The shared properties of one decoded sample, from its output and decode trace.

    `shift`: 1 where the block opening commits the block's first position (a shifted family, unless the
    decoder decides it itself: `Engine.commits_at_opening`). Block-aligned families: `lead` prompt
    tokens sit at the start of the first block (trace positions count from the response start), and a
    block-end EOS stop may decode fewer than `max_blocks` blocks (blocks=None: as many as the trace
    shows). `idle_steps`: the decoder declares that a step may commit nothing; its blocks must still
    end within block_length steps, the last one committing. With `sub_block_length` every decision
    stays inside the sub-block its event names. `cut`: a decoder that cuts the canvas ended it early
    (`Plan.truncate`), so fewer blocks ran, without an end-of-sequence needed."""
    L = block_length
    if blocks is None:
        blocks = len({e["block"] for e in events})
        assert 1 <= blocks <= max_blocks and sorted({e["block"] for e in events}) == list(range(blocks))
        if blocks < max_blocks and not cut:  # stopped early: only after a block that left an EOS in the response
            assert set(eos) & set(out.tokens), "fewer blocks than the run has, without an end-of-sequence"
    assert mask not in out.tokens, "a block ended masked or the mask id was committed"
    assert out.nfe == calls, f"NFE {out.nfe} but {calls} forwards ran"
    opens = [e for e in events if e["phase"] == "open"]
    steps = [e for e in events if e["phase"] == "step"]
    fills = [e for e in events if e["phase"] == "fill"]  # blocks a decoder ended with masks (`Plan.defer`)
    # shifted families: the block opening commits the block's first position (when it is no prompt
    # position), nothing else does
    opened = [[L * b - lead] for b in range(blocks) if L * b - lead >= 0]
    assert [[p for p, _ in e["committed"]] for e in opens] == (opened if shift else [])
    for e in steps + opens + fills:  # commits, remasks and edits only inside the current block (never the prompt's tail)
        for p in [p for p, _ in e["committed"]] + e.get("remasked", []) + [p for p, _, _ in e.get("edited", [])]:
            assert max(0, L * e["block"] - lead) <= p < L * (e["block"] + 1) - lead, f"position {p} outside block {e}"
            if sub_block_length is not None and sub_block_length < L and e["phase"] == "step":
                lo = L * e["block"] - lead + sub_block_length * e["sub_block"]
                assert lo <= p < lo + sub_block_length, f"position {p} outside sub-block {e}"
    assert len({e["block"] for e in fills}) == len(fills), "more than one fill forward for a block"
    for b in range(blocks):  # progress: after t steps of a block at least t tokens net committed
        if any(e["block"] == b for e in fills):
            continue  # a fixed schedule that ended the block with masks (its positions were taken back)
        net = 0
        mine = [e for e in steps if e["block"] == b]
        if idle_steps:  # a fixed schedule of forwards, some committing nothing: bounded, and it ends the block
            for sb in sorted({e.get("sub_block", 0) for e in mine}):  # (each of its sub-blocks)
                part = [e for e in mine if e.get("sub_block", 0) == sb]
                assert len(part) <= L and part[-1]["committed"], f"no progress in block {b}: {part}"
            continue
        for t, e in enumerate(mine, 1):
            net += len(e["committed"]) - len(e.get("remasked", []))
            assert net >= t, f"no progress: {e}"
    # no forward once a block is complete: one opening forward per block, then exactly one forward
    # per step (and per shifted opening commit) except the one that completes the block, plus one
    # per resolve that carried nothing into a step to come, plus one per block filled after the last
    resolves = [e for e in events if e["phase"] == "resolve"]
    run = [e for e in steps + opens + resolves if e["forward"] is not None]
    assert out.nfe == blocks + len(run) + len(fills), "a forward that no decision asked for, or one missing"
    assert sum(e["forward"] is None for e in steps + opens) == blocks, "a block went on after it was complete"


def _check_sample(out, events, calls, prompt_length: int, *, gen_length: int, block_length: int, block_causal: bool,
                  shift: int, mask: int, eos, idle_steps: bool = False, sub_block_length: int | None = None) -> None:
    """`check_invariants` with the block layout of the family: a block-causal family's blocks start at
    position 0 (the first holds the prompt's tail) and an end-of-sequence may stop it early."""
    # a decoder that cuts the canvas (`cuts_canvas`) may end it early: the response is what is left, and the
    # blocks that ran are those that still had positions
    cut = len(out.tokens) < gen_length
    if block_causal:
        check_invariants(out, events, calls, blocks=None, block_length=block_length, shift=shift, mask=mask,
                         lead=prompt_length % block_length,
                         max_blocks=-(-(prompt_length + gen_length) // block_length) - prompt_length // block_length,
                         eos=eos, idle_steps=idle_steps, sub_block_length=sub_block_length, cut=cut)
    else:
        blocks = -(-len(out.tokens) // block_length) if cut else gen_length // block_length
        check_invariants(out, events, calls, blocks=blocks, block_length=block_length,
                         shift=shift, mask=mask, idle_steps=idle_steps, sub_block_length=sub_block_length)


def check_decoder(make, *, families=FAMILIES, caches=("none", "prefix", "dual"), gen_length: int = 12,
                  block_length: int = 4) -> None:
    """Every invariant on the scripted families: `make()` returns a fresh decoder (a Scheduler).
    One sample per family and cache with its trace checked, the same run again (determinism), and a
    batch of three prompts against three single runs; on the block-causal family, whose cache is exact,
    prefix and dual decode the tokens none does."""
    from .platform.runtime.engine import GenerationConfig

    for family in families:
        tokens = {}
        for cache in caches:
            engine, model = scripted_engine(family)
            events: list = []
            cfg = GenerationConfig(gen_length=gen_length, block_length=block_length, cache=cache)
            prompt = list(SCRIPTED_PROMPTS[0])
            dec = make()
            out = engine.generate([prompt], dec, cfg, trace=events.append)[0]
            where = f"{family} family, cache {cache}"
            try:  # a decoder that follows a reference: the followed decoder's forwards ran first
                _check_sample(out, events, model.calls - (out.reference_nfe or 0), len(prompt), gen_length=gen_length,
                              block_length=block_length,
                              block_causal=family == "block_causal", shift=int(engine.commits_at_opening(dec, cache)),
                              mask=SCRIPTED_MASK, eos=(SCRIPTED_EOS,), idle_steps=dec.idle_steps)
            except AssertionError as exc:
                raise AssertionError(f"{where}: {exc}") from None
            again = scripted_engine(family)[0].generate([prompt], make(), cfg)[0]
            assert (again.tokens, again.nfe) == (out.tokens, out.nfe), f"{where}: not deterministic"
            batch_cfg = GenerationConfig(gen_length=2 * block_length, block_length=block_length, cache=cache)
            batch_engine, batch_model = scripted_engine(family)
            batch = batch_engine.generate([list(p) for p in SCRIPTED_PROMPTS], make(), batch_cfg)
            singles = [scripted_engine(family)[0].generate([list(p)], make(), batch_cfg)[0] for p in SCRIPTED_PROMPTS]
            assert [(b.tokens, b.nfe) for b in batch] == [(s.tokens, s.nfe) for s in singles], \
                f"{where}: a batch decodes other tokens or forwards than single runs"
            assert batch_model.row_calls == sum(s.nfe + (s.reference_nfe or 0) for s in singles), \
                f"{where}: a finished row was forwarded"
            tokens[cache] = out.tokens
        if family == "block_causal" and "none" in tokens:
            assert all(t == tokens["none"] for t in tokens.values()), "block-causal: a cache changed the tokens"


def check_decoder_on_model(make, lm, *, caches=("none", "prefix", "dual"), prompts=((12, 40, 77, 3, 90, 15), (5, 9, 33)),
                           gen_length: int = 16, block_length: int = 8, sub_block_length: int | None = None) -> None:
    """Every invariant on a loaded checkpoint (`ripple.platform.runtime.loading.load_model`): each prompt
    alone with its trace checked, then the prompts as one batch (same tokens and NFE: also determinism);
    where the family's cache is exact (block diffusion) prefix and dual decode the tokens none does
    (not dual with sub-blocks, whose sub-block forwards read the block's keys from an earlier forward)."""
    from .platform.runtime.engine import Engine, GenerationConfig

    bc = bool(getattr(lm.model, "block_causal", False))
    tokens = {}
    for cache in caches:
        cfg = GenerationConfig(gen_length=gen_length, block_length=block_length, cache=cache,
                               sub_block_length=sub_block_length)

        def engine():
            model = CountedModel(lm.model)
            return Engine(model, mask_id=lm.mask_id, eos_ids=lm.eos_ids, pad_id=lm.pad_id), model

        singles = []
        for p in prompts:
            eng, model = engine()
            events: list = []
            dec = make()
            out = eng.generate([list(p)], dec, cfg, trace=events.append)[0]
            try:
                _check_sample(out, events, model.calls - (out.reference_nfe or 0), len(p), gen_length=gen_length,
                              block_length=block_length,
                              block_causal=bc, shift=int(eng.commits_at_opening(dec, cache)), mask=lm.mask_id,
                              eos=lm.eos_ids, idle_steps=dec.idle_steps, sub_block_length=sub_block_length)
            except AssertionError as exc:
                raise AssertionError(f"cache {cache}, prompt {list(p)}: {exc}") from None
            singles.append(out)
        batch = engine()[0].generate([list(p) for p in prompts], make(), cfg)
        assert [(b.tokens, b.nfe) for b in batch] == [(s.tokens, s.nfe) for s in singles], \
            f"cache {cache}: a batch decodes other tokens or forwards than single runs (or a run is not deterministic)"
        if not (cache == "dual" and sub_block_length is not None and sub_block_length < block_length):
            # a decoder that decides a shifted block's first position itself does so only without a cache
            tokens.setdefault(eng.commits_at_opening(dec, cache), {})[cache] = [s.tokens for s in singles]
    for same in tokens.values() if bc else ():
        assert len({tuple(t) for t in same.values()}) == 1, f"block diffusion: a cache changed the tokens ({same})"


def check_follower(make, lm, *, follows=("default", "confidence"), caches=("none", "prefix", "dual"),
                   prompts=((12, 40, 77, 3, 90, 15), (5, 9, 33)), gen_length: int = 16, block_length: int = 8,
                   sub_block_length: int | None = None, one_per_forward=("default",)) -> None:
    """A decoder that follows a reference (`follows_reference`; `make(follow)` builds one following the
    registered decoder `follow`) on a loaded checkpoint, for every followed decoder and cache: in one
    batch of `prompts` each sample's tokens equal the followed decoder's token for token and its
    `reference_nfe` is that decoder's NFE; alone, a sample's NFE counts its own forwards only (the model
    ran reference_nfe + nfe); following a decoder of `one_per_forward` takes at most its forwards."""
    from .decoders import build
    from .platform.runtime.engine import Engine, GenerationConfig

    def engine():
        model = CountedModel(lm.model)
        return Engine(model, mask_id=lm.mask_id, eos_ids=lm.eos_ids, pad_id=lm.pad_id), model

    batch = [list(p) for p in prompts]
    for follow in follows:
        for cache in caches:
            where = f"following {follow}, cache {cache}"
            cfg = GenerationConfig(gen_length=gen_length, block_length=block_length, cache=cache,
                                   sub_block_length=sub_block_length)
            refs = engine()[0].generate(batch, build(follow), cfg)
            outs = engine()[0].generate(batch, make(follow), cfg)
            for r, (ref, out) in enumerate(zip(refs, outs)):
                assert out.tokens == ref.tokens, f"{where}, prompt {r}: {out.tokens} is not the reference {ref.tokens}"
                assert out.reference_nfe == ref.nfe, \
                    f"{where}, prompt {r}: reference_nfe {out.reference_nfe}, not {ref.nfe}"
                if follow in one_per_forward:
                    assert out.nfe <= ref.nfe, f"{where}, prompt {r}: NFE {out.nfe} above {follow}'s {ref.nfe}"
            eng, model = engine()
            alone = eng.generate(batch[:1], make(follow), cfg)[0]
            assert model.calls == alone.nfe + alone.reference_nfe and alone.nfe == outs[0].nfe, \
                f"{where}: {model.calls} forwards ran for NFE {alone.nfe} + reference {alone.reference_nfe}"


class CountedRenoisingModel:
    """A uniform-noise model that counts its decoder forwards and encoder passes per row."""

    def __init__(self, model):
        self.model, self.decodes, self.encodes = model, 0, 0
        self.noise, self.family, self.vocab_size = model.noise, model.family, model.vocab_size

    def encode(self, ids, *args, **kwargs):
        self.encodes += ids.shape[0]
        return self.model.encode(ids, *args, **kwargs)

    def decode(self, canvas, *args, **kwargs):
        self.decodes += canvas.shape[0]
        return self.model.decode(canvas, *args, **kwargs)


def check_renoising_decoder(make, lm, *, caches=("prefix", "none"), prompts=((5, 6, 7, 8, 9), (10, 11, 12),
                            (13, 14, 15, 16, 17, 18, 19)), seeds=(3, 4, 5), gen_length: int = 12,
                            block_length: int = 4) -> None:
    """The renoising invariants on a loaded uniform-noise checkpoint (DiffusionGemma): no canvas the
    engine feeds and no emitted token is outside the vocabulary (there is no mask id), a canvas ends
    within the decoder's bound of forwards, NFE equals the model calls made (decoder forwards and
    encoder passes), a seed decides the tokens, and a batch with other seeds equals single runs."""
    from .platform.runtime.engine import Engine, GenerationConfig

    bound = make().max_canvas_forwards
    vocab = lm.model.vocab_size
    for cache in caches:
        cfg = GenerationConfig(gen_length, block_length, cache, block_aligned=True)

        def run(batch, batch_seeds, events=None):
            model = CountedRenoisingModel(lm.model)
            engine = Engine(model, mask_id=lm.mask_id, eos_ids=lm.eos_ids, pad_id=lm.pad_id)
            outs = engine.generate([list(p) for p in batch], make(), cfg,
                                   trace=None if events is None else events.append, seeds=list(batch_seeds))
            return outs, model

        singles = []
        for p, seed in zip(prompts, seeds):
            events: list = []
            (out,), model = run([p], [seed], events)
            where = f"cache {cache}, prompt {list(p)}, seed {seed}"
            fed = [t for e in events if e["phase"] == "step" for t in e["input"] + e["argmax"]]
            assert all(0 <= t < vocab for t in fed + list(out.tokens)), f"{where}: a token outside the vocabulary"
            steps = [e for e in events if e["phase"] == "step"]
            for k in {e["canvas"] for e in steps}:
                n = [e for e in steps if e["canvas"] == k]
                assert 1 <= len(n) <= bound and [e["end"] for e in n] == [False] * (len(n) - 1) + [True], \
                    f"{where}: canvas {k} did not end within {bound} forwards, once"
            assert out.nfe == model.decodes + model.encodes and out.encoder_nfe == model.encodes, \
                f"{where}: NFE {out.nfe} but {model.decodes} decoder forwards and {model.encodes} encoder passes"
            assert len(steps) == model.decodes and out.encoder_nfe == sum(e["phase"] == "encode" for e in events)
            again = run([p], [seed])[0][0]
            assert (again.tokens, again.nfe) == (out.tokens, out.nfe), f"{where}: not deterministic for a seed"
            singles.append(out)
        batch, model = run(prompts, seeds)
        assert [(b.tokens, b.nfe) for b in batch] == [(s.tokens, s.nfe) for s in singles], \
            f"cache {cache}: a batch decodes other tokens or forwards than single runs"
        assert model.decodes + model.encodes == sum(s.nfe for s in singles), f"cache {cache}: a finished row ran"


# ---------------------------------------------------------------------------- trajectories
@dataclass(frozen=True)
class Mismatch:
    case: str
    what: str


def compare_trajectories(model, cases, decoder: str | None = None, *, cache: str = "none", settings=None,
                         **options) -> list[Mismatch]:
    """Run each case of a golden-format list through `ripple.generate` (as `ripple generate` would, in
    float32 on the CPU) and compare. A case holds `prompt` (ids), `gen_length`, `block_length`,
    `output` (the response ids) and optionally `nfe`, `decoder`, `params` (Ripple's names), `cache`,
    `seed` (the sample's seed), `case` (its name) and `steps_log` (per forward `committed` [[response
    position, token], ...]: then every forward's commits are compared in order). `settings(case)` may
    map a case to hyperparameter strings; `options` are more keyword arguments of `ripple.generate`
    (stop_at_eos=True, ...). Returns the mismatches (empty: all equal)."""
    from .api import generate
    from .errors import RippleError

    found = []
    for i, case in enumerate(cases):
        name = str(case.get("case", i))
        pairs = settings(case) if settings is not None else case.get("params", {})
        try:
            out = generate(str(model), list(case["prompt"]), case.get("decoder", decoder),
                           gen_length=case["gen_length"], block_length=case["block_length"],
                           cache=case.get("cache", cache), seed=case.get("seed"), dtype="float32", device="cpu",
                           trace=True, **{**options, **{k: str(v) for k, v in pairs.items()}})
        except RippleError as exc:
            found.append(Mismatch(name, f"refused: {exc}"))
            continue
        if list(out.tokens) != list(case["output"]):
            found.append(Mismatch(name, f"output {list(out.tokens)} != {list(case['output'])}"))
        if "nfe" in case and out.nfe != case["nfe"]:
            found.append(Mismatch(name, f"NFE {out.nfe} != {case['nfe']}"))
        if isinstance(case.get("steps_log"), list):
            mine = [e["committed"] for e in out.trace if e["phase"] in ("step", "resolve")]
            ref = [e["committed"] for e in case["steps_log"]]
            if mine != ref:
                at = next((k for k, (a, b) in enumerate(zip(mine, ref)) if a != b), min(len(mine), len(ref)))
                found.append(Mismatch(name, f"commits differ from forward {at} on"))
    return found
