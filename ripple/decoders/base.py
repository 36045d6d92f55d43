"""The Scheduler protocol: a decoder decides where and what to commit; the engine owns
the model, canvas, cache, block loop, NFE counting and timing (DESIGN.md section 4).

Per step the engine hands a decoder one sample's `BlockState` and receives a `Plan`:
tokens to commit (and, for remasking decoders, positions to remask) and optionally
block variants to evaluate in one packed lookahead forward. After a lookahead the
decoder's `resolve` picks what to commit and which distributions to carry into the next
step, so no extra forward is run (or carries none, `Resolution.logits` None: the engine then runs
a normal forward on the canvas with the resolve's commit written, and the next step reads it). A plan may also ask for the leave-one-out shadow of the
block (WINO's verification): the engine packs it into the step's forward and hands its
logits to the next step as `BlockState.shadow`. A decoder that declares
`needs_rows_beyond_block` (KLASS, whose distribution history runs across block boundaries)
also gets the next block's distributions from every forward as `BlockState.beyond`; the
others' forwards compute the block's rows only.

A decoder that declares `edits_tokens` (token editing, LLaDA2.1's Token-to-Token rule) may
also rewrite positions of the current block that earlier steps wrote (`Plan.edit`; never the
prompt, a position fixed at the opening, another block or the mask id): the engine writes a
step's commits and edits together and, once the block holds no mask, keeps running "post"
forwards while the decoder's post steps edit, at most `max_post_forwards` of them per block.
Decoders that do not declare it are never asked a post step.

Other needs are declared too, never named (the field's decoders, issue 35):
- state across a block's steps lives in `BlockState.memory`, which the engine creates per sample
  and block and drops at the block's end (CreditDecoding's credit matrix, SlowFast's sub-cycle);
  state across blocks lives in `BlockState.sample_memory`, one per sample, dropped with it. No
  state is ever kept on the decoder object, so nothing leaks from one sample to the next;
- a decoder that declares `defers_masks` may end a block with masks left (`Plan.defer`; DUS's
  taken-back tokens, which belong to no later level): later blocks decode with those masks in
  place, as the reference does, and after the last block the engine fills each such block with
  one forward (top-1 tokens other than the mask id, counted in NFE), so no mask is left;
- a decoder that declares `shortens_canvas` may end a plan's next forward early (`Plan.extent`:
  the canvas is cut after that block offset, what follows is absent, not masked; SlowFast's later
  fill forwards); the block rows past the cut keep their last distributions;
- a decoder that declares `cuts_canvas` may end the canvas for good (`Plan.truncate`: Learn2PD's
  end-of-text cut): positions from that block offset on, in this block and every later one, leave
  the canvas; every later forward sees the shorter canvas, later blocks cover what is left and the
  response is shorter than gen_length. Under `dual` the block's remaining forwards still read the
  keys cached at its opening outside their window, the removed suffix's included, as Fast-dLLM's
  dual cache does; a decoder that `rows_to_end` (a configuration property) also gets, from every
  forward whose window reaches the canvas end (cache none or prefix), the logits of the positions
  after the block (`BlockState.rest`, with their tokens `rest_tokens`);
- a decoder that declares `follows_reference` (the oracle, issue 51) names a decoder through
  `reference_decoder()`: the engine runs that one first on the same prompts and run settings
  (ripple/platform/runtime/reference.py) and hands each block state its sample's reference tokens
  (`BlockState.reference`); only the follower's own forwards count in NFE, the reference run's go
  to `SampleOutput.reference_nfe`. A decoder that follows a reference is never followed;
- a decoder that needs a model beside the dLLM (a draft-and-verify decoder's verifier) names it per
  configuration in `auxiliary_models()` ({role: reference}); the engine refuses a run whose model it
  does not hold and hands it back by role (`RunShape.models`, `BlockState.models`), counting its calls
  apart from NFE (ripple/platform/runtime/auxiliary.py);
- a decoder whose rule depends on the run's geometry (PC-Sampler's steps per block, a prior over
  the model's vocabulary) checks it in `prepare`, once per `generate`, before any forward, and
  reads `BlockState.n_blocks` (the blocks this sample decodes).

Renoising (issue 36; DiffusionGemma): a decoder declares the kind of family it decodes, `noise`
("mask", every decoder above, or "uniform"), and the engine refuses a mismatch in one line naming
what the model needs. On a uniform-noise family the canvas holds tokens, never masks: a canvas
(the block) starts as uniform random tokens, and per step the engine hands the decoder the raw
logits of one decoder forward in a `BlockState` (its `mask_id` is -1, `step` counts the canvas's
forwards, `memory` lives for the canvas). The plan names the distribution to sample from
(`Plan.sample`, logits [L, V]), which positions keep their sampled token (`Plan.keep`), the
self-conditioning logits of the next forward (`Plan.carry`) and whether the canvas ends
(`Plan.end`, at the latest after `max_canvas_forwards` forwards). The engine makes the draws from
the sample's own CPU generator (one multinomial over softmax(sample), then one uniform redraw of
the whole canvas, every step; ripple/platform/runtime/renoising.py) and emits the argmax of the
last step's `sample`. The decoder decides; the engine owns the randomness.

Sub-blocks (the run setting `sub_block_length`, Fast-dLLM v2's small blocks): the engine decodes a
block's sub-blocks left to right and shows a decoder only the current one (`BlockState.window`):
`masked` and `decoded` cover it, and commits, edits and remasks outside it are protocol errors;
`step` and `memory` still run over the whole block (a schedule fixed per sub-block keys it on
`window`: DUS, PC-Sampler). Forwards still cover what the cache policy says.

For shifted-logit families (Dream) the engine commits the block's first position at the
block opening (ripple/platform/runtime/engine.py); such positions are marked in `BlockState.fixed`
and are never remasked. A decoder that declares `decides_first_position` (ParallelBench's Dream
loop, which has no such commit) decides that position itself from the opening forward's row before
the block, where the recomputed window holds that row (cache `none`); with a cache the engine still
commits it at the opening. Such a decoder packs no block copies (lookahead, shadow).

A decoder with a second model (APD's verifier, issue 58) usually declares it as a hyperparameter made
with `params.auxiliary` (the kind of model: a causal LM); `auxiliary_models()` then returns {hyperparameter:
its value} and the platform (ripple/platform/runtime/auxiliary.py `AuxiliaryModels`) loads each once per
process beside the dLLM, refuses one that cannot serve it and hands it to the engine. Its forwards reach
`SampleOutput.verifier_nfe`, never NFE.

Decoders that draw random numbers (ParallelBench's random ranking) say so per configuration
(`draws`): each sample then gets its own CPU `torch.Generator`, seeded with the sample's seed, as
`BlockState.generator`, so a sample's draws depend on its seed only, never on the batch. A decoder
whose fixed schedule may leave a forward without a commit (ParallelBench's Dream quotas, rounded
down in float32) declares `idle_steps`; it must still end every block within `block_length` steps.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import RippleError
from ..lazy import torch
from .params import HyperParams

CACHE_POLICIES = ("none", "prefix", "dual")  # the block caches: any block decoder runs under each
# every policy's name (ripple/platform/runtime/caches/): the block caches, then `sliding` (APD's sliding KV
# window, which reads `horizon` and `kv_window`), for decoders that list it in `supported_caches` only
CACHE_NAMES = CACHE_POLICIES + ("sliding",)


def no_positions() -> torch.Tensor:
    """An empty position list [0]: a fresh one per record, so importing the protocol needs no torch."""
    return torch.zeros(0, dtype=torch.long)


@dataclass(frozen=True)
class Commit:
    """Block-relative positions [k] and the tokens [k] to write there."""

    positions: torch.Tensor = field(default_factory=no_positions)
    tokens: torch.Tensor = field(default_factory=no_positions)

    def __len__(self) -> int:
        return int(self.positions.numel())


@dataclass(frozen=True)
class Plan:
    commit: Commit = field(default_factory=Commit)
    # block positions already decoded to rewrite, and their new tokens (decoders that declare
    # `edits_tokens`); written together with `commit`, judged on the step's distributions
    edit: Commit = field(default_factory=Commit)
    remask: torch.Tensor = field(default_factory=no_positions)  # block-relative positions to set back to the mask id
    variants: torch.Tensor | None = None  # [m, L] block contents to evaluate by packed lookahead
    # also evaluate the shadow in the forward that follows this step: an all-mask copy of the
    # block window with the block's position ids whose row predicting block position j cannot
    # see the canvas token at j (ripple/platform/runtime/engine.py); its logits arrive as `BlockState.shadow`
    shadow: bool = False
    # what `resolve` needs from `step` (e.g. RPS's pivot, LoPA's branch positions): the decoder's own
    # frozen dataclass, opaque to the engine; `info` is only for the decode trace
    context: Any = None
    info: dict[str, Any] = field(default_factory=dict)  # for the decode trace
    # the next forward sees the canvas only up to this block offset (decoders that declare
    # `shortens_canvas`; None: the whole canvas the family's forward sees)
    extent: int | None = None
    # the canvas ends before this block offset for good (decoders that declare `cuts_canvas`; may lie
    # past the block, in a later one): the positions from it on leave the canvas
    truncate: int | None = None
    # end the block now even if masks remain (decoders that declare `defers_masks`): the engine
    # fills them after the last block, one forward per such block
    defer: bool = False
    # renoising decoders (`noise = "uniform"`) only, every step sets `keep` and `sample`:
    # logits [L, V] the engine samples from (one multinomial over their float32 softmax), and the
    # positions [L] bool that keep their sampled token (the engine redraws the others uniformly)
    sample: torch.Tensor | None = None
    keep: torch.Tensor | None = None
    # self-conditioning logits [L, V] for the canvas's next forward (None: none)
    carry: torch.Tensor | None = None
    # the canvas ends with this step: the engine emits the argmax of `sample`
    end: bool = False


@dataclass(frozen=True)
class RunShape:
    """What a decoder may check before a run (`Scheduler.prepare`)."""

    gen_length: int
    block_length: int
    n_blocks: tuple[int, ...]  # blocks each sample decodes (block alignment decides it)
    vocab_size: int
    mask_id: int
    model_dir: str | None = None  # the model's folder when loaded from one (shipped data such as a prior)
    logit_shift: int = 0  # 1 when the family's prediction for position i is the logits at i-1 (Dream)
    cache: str = "none"  # the run's cache policy
    eos_ids: tuple[int, ...] = ()  # the ids that end a response (the family's stop ids)
    # the weights digest of the model (`weights_digest`: sha256 prefix), for decoders that declare
    # `checks_weights` (a learned filter names the model it was trained on); None: unknown
    weights: str | None = None
    # the models this configuration declared beside the dLLM (`Scheduler.auxiliary_models`), by role
    models: dict[str, Any] = field(default_factory=dict)
    family: str = ""  # the model's family (ripple/platform/runtime/models/family.py), for decoders made for some


@dataclass(frozen=True)
class Lookahead:
    anchor: torch.Tensor  # [L, V] logits of the current block state
    variants: torch.Tensor  # [m, L, V] logits of each variant's block


@dataclass(frozen=True)
class Resolution:
    commit: Commit
    # [L, V] distributions carried into the next step (no forward); None: nothing carried, a normal
    # forward on the canvas (the commit written) gives the next step its distributions
    logits: torch.Tensor | None
    info: dict[str, Any] = field(default_factory=dict)


class BlockState:
    """One sample's current block as a decoder sees it. The engine updates tokens/logits."""

    def __init__(self, tokens: torch.Tensor, logits: torch.Tensor, mask_id: int, block_index: int,
                 sample_memory: dict[str, Any] | None = None, n_blocks: int = 1,
                 generator: torch.Generator | None = None):
        self.tokens = tokens  # [L] view into the canvas
        self.mask_id = mask_id
        self.block_index = block_index
        self.n_blocks = n_blocks  # blocks this sample decodes
        self.response_offset = 0  # block position j is response position response_offset + j (for traces)
        self.prompt_length = 0  # the sample's prompt tokens (position id of its first response position)
        # the sample's own CPU random generator, for decoders whose configuration `draws`; None otherwise
        self.generator = generator
        self.step = 0
        self.memory: dict[str, Any] = {}  # decoder scratch, lives for this sample's block
        # block offsets [lo, hi) of the current sub-block (`sub_block_length`): where a decoder commits,
        # edits and remasks; the whole block by default. `masked` and `decoded` only cover it
        self.window = (0, tokens.shape[0])
        self._inside: torch.Tensor | None = None  # [L] bool of the window; None: the whole block
        # decoder scratch that lives for the whole sample, across its blocks
        self.sample_memory: dict[str, Any] = {} if sample_memory is None else sample_memory
        # [L] bool: positions the engine committed at the block opening (shifted families); never remasked
        self.fixed = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
        # [L, V] logits of the next block's positions from the same forward as `logits`, for decoders
        # that declare `needs_rows_beyond_block`; None otherwise and in the last block
        self.beyond: torch.Tensor | None = None
        # [L] the followed decoder's final token at each block position, -1 where it wrote none (the
        # prompt's tail, past the row's end), for decoders that declare `follows_reference`; None otherwise
        self.reference: torch.Tensor | None = None
        # decoders whose configuration `rows_to_end`: logits [n, V] of the canvas positions after the block
        # up to the canvas end, and their tokens [n] (a view), from the last forward; None where its window
        # did not reach them (dual, a block-causal family's extent) or in the last block
        self.rest: torch.Tensor | None = None
        self.rest_tokens: torch.Tensor | None = None
        # the models the decoder declared beside the dLLM (`Scheduler.auxiliary_models`), by role; each call
        # of one counts a forward of that role for this sample, apart from NFE (a causal LM's `causal_step(ids,
        # past)` is the platform's causal forward, counted). Empty for the others
        self.models: dict[str, Any] = {}
        # the sample's tokens before the block (its prompt and earlier blocks, no padding) [P]: a view; what
        # a decoder's own model reads as context (APD's verifier)
        self.context: torch.Tensor = tokens[:0]
        self._logits = logits
        self._probs: torch.Tensor | None = None
        self._shadow: torch.Tensor | None = None
        self._shadow_probs: torch.Tensor | None = None

    @property
    def logits(self) -> torch.Tensor:  # [L, V]
        return self._logits

    @logits.setter
    def logits(self, value: torch.Tensor) -> None:
        self._logits = value
        self._probs = None

    @property
    def probs(self) -> torch.Tensor:
        """float64 softmax over the full vocabulary, as the reference code computes it: [L, V]."""
        if self._probs is None:
            self._probs = torch.softmax(self._logits.to(torch.float64), dim=-1)
        return self._probs

    @property
    def shadow(self) -> torch.Tensor | None:
        """Leave-one-out logits [L, V] from the last forward if the plan asked for them, else None.

        Row j predicts block position j from the block as it stood when that forward ran (the
        step's start) with j itself hidden; its probability of j's current token verifies it.
        """
        return self._shadow

    @shadow.setter
    def shadow(self, value: torch.Tensor | None) -> None:
        self._shadow = value
        self._shadow_probs = None

    @property
    def shadow_probs(self) -> torch.Tensor | None:
        """float64 softmax of `shadow`: [L, V], or None."""
        if self._shadow is not None and self._shadow_probs is None:
            self._shadow_probs = torch.softmax(self._shadow.to(torch.float64), dim=-1)
        return self._shadow_probs

    @property
    def masked(self) -> torch.Tensor:  # [L] bool
        """Masked positions of the current sub-block (the block when it has none): the candidates."""
        m = self.tokens == self.mask_id
        return m if self._inside is None else m & self._inside

    @property
    def decoded(self) -> torch.Tensor:  # [L] bool
        """Positions of the current sub-block that hold a token and are not fixed: what a decoder may
        edit or remask."""
        d = (self.tokens != self.mask_id) & ~self.fixed
        return d if self._inside is None else d & self._inside

    @property
    def block_masked(self) -> torch.Tensor:  # [L] bool
        """Masked positions of the whole block, the sub-blocks after the current one included."""
        return self.tokens == self.mask_id

    def enter_sub_block(self, lo: int, hi: int) -> None:
        """Move the window to block offsets [lo, hi) (the engine, sub-blocks left to right)."""
        L = self.tokens.shape[0]
        self.window = (lo, hi)
        if (lo, hi) == (0, L):
            self._inside = None
        else:
            self._inside = torch.zeros(L, dtype=torch.bool, device=self.tokens.device)
            self._inside[lo:hi] = True


class Scheduler(ABC):
    """A parallel decoding rule. Subclasses set `name`, `Params` and their properties. A subclass
    defined in a caller's own code (a notebook cell, never registered) may leave out both: its name
    is then its class name and it has no hyperparameters."""

    name: ClassVar[str]
    Params: ClassVar[type[HyperParams]] = HyperParams
    uses_lookahead: ClassVar[bool] = False  # plans may carry `variants` (then `resolve` is called)
    uses_shadow: ClassVar[bool] = False  # plans may set `shadow` (leave-one-out verification)
    # every forward also computes the next block's rows (`BlockState.beyond`); costs nothing when False
    needs_rows_beyond_block: ClassVar[bool] = False
    # plans may carry `edit` (token editing) and the block may run post forwards (`max_post_forwards`)
    edits_tokens: ClassVar[bool] = False
    # plans may carry `extent`: the next forward sees the canvas only up to that block offset
    shortens_canvas: ClassVar[bool] = False
    # plans may end a block with masks left (`defer`); the engine fills them after the last block
    defers_masks: ClassVar[bool] = False
    # on a shifted-logit family, the first step decides the block's first position too (no commit at
    # the block opening) where the window holds the row before the block (cache none); module docstring
    decides_first_position: ClassVar[bool] = False
    # a step may commit nothing (a fixed schedule of forwards); every block still ends within block_length steps
    idle_steps: ClassVar[bool] = False
    # the engine first runs `reference_decoder()` on the same prompts and settings and hands its tokens
    # to the block states (`BlockState.reference`); module docstring
    follows_reference: ClassVar[bool] = False
    # plans may carry `truncate`: the canvas ends for good (module docstring); responses may be shorter
    cuts_canvas: ClassVar[bool] = False
    # `prepare` reads `RunShape.weights` (the engine digests the model's weights once for it)
    checks_weights: ClassVar[bool] = False
    # decides with a model trained on this model's decoding (a learned filter for one block length): it runs
    # only where such a file exists, so a grid's `decoders: all` leaves it out (name it, with its file)
    learned: ClassVar[bool] = False
    # decodes the response as one block under a cache policy of its own (APD): block length and cache are no
    # choice of its cells, which compare with the default and oracle cells of the same model, task and other
    # settings whatever their block and cache (a grid's speedup and NFE / oracle)
    own_geometry: ClassVar[bool] = False
    supported_caches: ClassVar[tuple[str, ...]] = CACHE_POLICIES
    display_order: ClassVar[int] = 50  # position in listings and tables (default 0 first, rps 90 last)
    # the kind of family this decoder decodes (ripple/platform/runtime/models/family.py NOISES): "mask"
    # (commits into masked positions) or "uniform" (renoises a canvas of tokens; module docstring)
    noise: ClassVar[str] = "mask"
    default_cache: ClassVar[str] = "none"  # the cache policy a run without --cache uses
    # hyperparameters that count forwards over the whole response (ParallelBench's `steps`): PBx compares
    # configurations by tokens per step, gen_length / value, so one setting at two response lengths
    # (32 and 64 tokens, steps 8 and 16) is one configuration (k = 4)
    response_steps_params: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(getattr(cls, "name", None), str):
            cls.name = cls.__name__

    def __init__(self, params: HyperParams | None = None):
        self.params = params if params is not None else self.Params()

    @property
    def may_edit(self) -> bool:
        """Whether this configuration can rewrite a token (then no token is final before its block
        ends, and the engine never ends a row mid-block at an end-of-sequence token)."""
        return False

    @property
    def draws(self) -> bool:
        """Whether this configuration draws random numbers (then `BlockState.generator` is the sample's own)."""
        return False

    @property
    def rows_to_end(self) -> bool:
        """Whether this configuration reads the rows after the block (`BlockState.rest`)."""
        return False

    @classmethod
    def artifacts(cls, params: HyperParams, model_dir: str | None) -> dict[str, str]:
        """Files this configuration reads whose content changes its results (a learned filter), as
        {what: sha256}, for the cell's identity: a changed file is a new cell, as a changed checkpoint is.
        `model_dir`: the model's folder where known (data it ships), else None. Raises RippleError (one
        line) for a configuration whose file the model's folder does not hold, so a grid refuses it up front."""
        return {}

    @property
    def max_post_forwards(self) -> int:
        """Post forwards a block may run after its last mask is filled (token editing)."""
        return 0

    @property
    def max_canvas_forwards(self) -> int:
        """Renoising decoders: forwards after which a canvas must have ended (the engine's bound)."""
        return 0

    @classmethod
    def model_defaults(cls, generation: dict[str, Any]) -> dict[str, str]:
        """Hyperparameter strings (as `--set` takes them) that a model's generation_config.json sets;
        `ripple generate` and `ripple eval` use them for the settings not given with --set."""
        return {}

    def auxiliary_models(self) -> dict[str, str]:
        """Models this configuration needs beside the dLLM, {role: reference} (a folder, a hub id or an
        embedded name, e.g. a verifier named by a hyperparameter): loaded once beside the dLLM and handed
        back as `RunShape.models` and `BlockState.models` (ripple/platform/runtime/auxiliary.py). By
        default the hyperparameters declared with `params.auxiliary` that are set, each its own role."""
        return self.params.auxiliary_models()

    @property
    def horizon(self) -> int | None:
        """Positions from a row's first mask on that its forwards see (APD's lookahead: the canvas ends
        there for that forward); None: the whole canvas. Read by the cache policy `sliding` only."""
        return None

    @property
    def kv_window(self) -> int | None:
        """Positions before the previous step's first mask that the cache policy `sliding` recomputes
        (APD's W); None for decoders that do not run under it."""
        return None

    def reference_decoder(self) -> "Scheduler":
        """The decoder whose completion this one follows (decoders that declare `follows_reference`)."""
        raise RuntimeError(f"decoder {self.name!r} follows no reference")

    def prepare(self, shape: RunShape) -> None:
        """Check this configuration against a run before any forward; raise RippleError (one line)
        when it cannot run (e.g. steps not divisible by the number of blocks). It may keep what it
        derives from the run's configuration (PC-Sampler's prior), never a sample's state."""

    @abstractmethod
    def step(self, state: BlockState) -> Plan:
        """Decide this step's commits from `state.logits` (at least one while masks remain; for an
        editing decoder, also called on a full block, where it may only edit)."""

    def resolve(self, state: BlockState, plan: Plan, look: Lookahead) -> Resolution:
        raise RuntimeError(f"decoder {self.name!r} planned a lookahead but does not resolve one")


def greedy(state: BlockState) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-1 token per block position (never the mask id) and its probability.

    Returns tokens [L] and confidence [L] (float64, -inf where already decoded).
    """
    tokens, conf = top1(state)
    conf = torch.where(state.masked, conf, torch.full_like(conf, float("-inf")))
    return tokens, conf


def most_confident(state: BlockState) -> Commit:
    """The single most confident masked position with its top-1 token other than the mask id: the
    fallback that keeps a block moving where a reference rule would commit nothing or the mask id."""
    tokens, conf = greedy(state)
    at = top1_index(conf)
    return Commit(torch.tensor([at], device=tokens.device), tokens[at:at + 1])


def top1(state: BlockState) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-1 token other than the mask id [L] and its float64 probability [L], at every position."""
    logits = state.logits.clone()
    logits[:, state.mask_id] = float("-inf")
    tokens = logits.argmax(dim=-1)  # [L]
    return tokens, state.probs.gather(-1, tokens[:, None]).squeeze(-1)


def step_quota(state: BlockState, steps: int) -> int:
    """Commits step `state.step` of a block owes under an S-step schedule (S = 0: one per step),
    at least one and at most the masks left: block_length // S, plus one for the first
    block_length mod S steps."""
    L = state.tokens.shape[0]
    k = L // steps + (1 if state.step < L % steps else 0) if steps > 0 else 1
    return max(1, min(k, int(state.masked.sum())))


def top_prob(probs: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Probability of the top-1 token other than the mask id, `greedy`'s confidence: [..., V] -> [...]."""
    keep = torch.ones(probs.shape[-1], dtype=torch.bool, device=probs.device)
    keep[mask_id] = False
    return probs[..., keep].max(dim=-1).values


def entropy(p: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary entropy in nats over the last dim (0 log 0 = 0)."""
    return -torch.special.xlogy(p, p).sum(-1)


def argmax_probs(logits: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x0 = argmax over the whole vocabulary, the mask id included (first index on ties), and its
    softmax probability in `dtype` (default float32), as the field's reference decoders compute
    them: [L, V] -> [L], [L]."""
    x0 = logits.argmax(dim=-1)  # [L]
    p = torch.softmax(logits.to(dtype or torch.float32), dim=-1).gather(-1, x0[:, None]).squeeze(-1)
    return x0, p


def top1_index(conf: torch.Tensor) -> int:
    """Most confident position; ties go to the lower index (argmax returns the first)."""
    return int(torch.argmax(conf))


def check_block_steps(who: str, steps: int, shape: RunShape) -> None:
    """Refuse a total `steps` (0: none set) that the run's blocks cannot share evenly, as LLaDA's schedule
    asserts: the decoders with LLaDA's `steps` (pc_sampler, learn2pd) check it alike in `prepare`."""
    for n in sorted(set(shape.n_blocks)) if steps else ():
        if steps % n:
            raise RippleError(f"{who} steps={steps} must be a multiple of the number of blocks ({n}: "
                              f"gen_length {shape.gen_length}, block_length {shape.block_length})")
