"""`apd`: adaptive parallel decoding with an autoregressive verifier (APD, Israel, Van den Broeck and
Grover, NeurIPS 2025; danielmisrael/apd@a555561, `apd_sample`), as shared/golden/README.md "APD" states it.

Per step, with cur the first mask and right = min(cur + M, canvas end) (`max_lookahead` M): the dLLM's
predictions d [L, V] for cur..right-1 (one forward that sees nothing from right on, under the cache policy
`sliding`, ripple/platform/runtime/caches/sliding.py, with `kv_window` W; the mask id's logit -inf) give a
draft: argmax d at temperature T = 0, else argmax exp(z) / (-ln u)^T in float64, z = d / T cut by top-p
then top-k (cut ids at float32's minimum), u one float64 uniform draw [L, V] from the sample's generator.
One verifier forward (a causal LM) scores the draft: its prediction v for each draft position after the
first (the prompt and draft at step 0; the draft on its cache of the committed tokens afterwards). The
target is argmax(R * d + (1 - R) * v) on raw float32 logits (`mixture` R; greedy at every T), and the
step commits the draft's first token and every next one while it equals the target. The run ends when
the response holds an end-of-sequence id (the canvas is cut after the step's last commit: the response is
the committed ids) or no mask is left. A family without the logit shift (LLaDA) reads position j's
prediction at its own row; otherwise APD's rules.

What the code runs when a call passes no sampling setting: T = 1.0, top_k 50, top_p 1.0 (Dream's generation
config takes transformers' legacy defaults), so these are the defaults here. `nfe` counts the dLLM's
forwards, `verifier_nfe` the verifier's (one per step each).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import RippleError
from ..lazy import torch
from .base import BlockState, Commit, Plan, RunShape, Scheduler
from .params import HyperParams, auxiliary, hp
from .registry import register

FAMILIES = ("dream", "llada")  # full-attention mask families (shifted or not): APD's one-canvas loop


@dataclass(frozen=True)
class APDParams(HyperParams):
    verifier: str = auxiliary("", doc="the causal LM that scores the draft (a folder, a hub id or an embedded "
                              "name), on the dLLM's tokenizer")
    mixture: float = hp(0.7, 0.0, 1.0, doc="R: target = argmax(R * dLLM + (1 - R) * verifier logits)")
    kv_window: int = hp(16, 1, None, doc="W: each forward recomputes from W - 1 positions before the previous "
                        "step's first mask; earlier keys are cached (stale)")
    max_lookahead: int = hp(16, 1, None, doc="M: draft positions per step (forwards see no further)")
    temperature: float = hp(1.0, 0.0, None, doc="draft temperature (0: argmax); APD's code default 1.0")
    top_p: float = hp(1.0, 0.0, 1.0, lo_open=True, doc="draft nucleus cut (1: none)")
    top_k: int = hp(50, 0, None, doc="draft top-k cut (0: none); APD's code default 50")


@register
class APD(Scheduler):
    name = "apd"
    display_order = 85
    Params = APDParams
    supported_caches = ("sliding",)
    default_cache = "sliding"
    # the row before the first mask is always in the window: no opening commit on a shifted family
    decides_first_position = True
    cuts_canvas = True  # the response ends after the step that commits an end-of-sequence id
    own_geometry = True  # one block under `sliding`: compared with default and the oracle at their blocks

    def __init__(self, params: HyperParams | None = None):
        super().__init__(params)
        self.eos: tuple[int, ...] = ()

    @property
    def draws(self) -> bool:
        return self.params.temperature > 0

    @property
    def horizon(self) -> int:
        return self.params.max_lookahead

    @property
    def kv_window(self) -> int:
        return self.params.kv_window

    def prepare(self, shape: RunShape) -> None:
        if shape.family not in FAMILIES:
            raise RippleError(f"decoder 'apd' decodes the {', '.join(FAMILIES)} families; this model is "
                              f"{shape.family or 'of another family'}")
        if shape.block_length != shape.gen_length:
            raise RippleError(f"decoder 'apd' decodes the response as one block (APD has no blocks): set "
                              f"block_length to gen_length ({shape.gen_length}), got {shape.block_length}")
        if set(shape.n_blocks) != {1}:
            raise RippleError("decoder 'apd' decodes the response as one block: blocks aligned to position 0 "
                              "split it here (use block_align response)")
        verifier = shape.models.get("verifier")
        if verifier is None:
            raise RippleError("decoder 'apd' needs a verifier: set verifier=<a causal LM's folder, hub id or "
                              "embedded name>")
        if not getattr(verifier, "causal", False):
            raise RippleError(f"decoder 'apd' hyperparameter verifier={self.params.verifier!r} is not a causal LM")
        self.eos = tuple(shape.eos_ids)

    def step(self, state: BlockState) -> Plan:
        p = self.params
        masked = state.block_masked.nonzero().squeeze(-1)  # [n]
        cur = int(masked[0])
        right = min(cur + p.max_lookahead, state.tokens.shape[0])
        d = state.logits[cur:right].float().clone()  # [L, V]
        d[:, state.mask_id] = float("-inf")  # (the golden's adaptation: the mask id is never drafted)
        draft = self._draft(d, state.generator)  # [L]
        v = self._verify(state, cur, draft)  # [L, Vv]: row i predicts draft position i (row 0 unused)
        n = min(d.shape[-1], v.shape[-1])  # APD's vocabulary cut: ids past the verifier's never match
        mix = p.mixture * d[:, :n] + (1 - p.mixture) * v[:, :n]  # [L, n] float32
        target = torch.where(mix.isnan(), float("-inf"), mix).argmax(dim=-1)  # [L] (R = 0: 0 * -inf at the mask id)
        same = (draft[1:] == target[1:]).long()  # [L - 1]
        a = 1 + int(same.cumprod(0).sum())
        kv = state.sample_memory["verifier_kv"]
        state.sample_memory["verifier_kv"] = kv.truncate(kv.length - draft.shape[0] + a)  # the committed tokens
        at = torch.arange(cur, cur + a, device=state.tokens.device)
        committed = draft[:a].to(state.tokens.device)
        stop = any(int(t) in self.eos for t in committed.tolist())
        info = {"pos": cur, "accepted": a, "draft": draft.tolist(),
                "rejected_by": int(target[a]) if a < draft.shape[0] else None}
        return Plan(Commit(at, committed), truncate=cur + a if stop else None, info=info)

    def _draft(self, d: torch.Tensor, generator) -> torch.Tensor:
        """Draft ids [L] from the dLLM's rows d [L, V] (module docstring)."""
        p = self.params
        if p.temperature == 0:
            return d.argmax(dim=-1)
        z = d / p.temperature  # [L, V] float32
        least = torch.finfo(z.dtype).min
        if p.top_p < 1:
            ranked, order = torch.sort(z, descending=True)
            cut = torch.cumsum(torch.softmax(ranked, dim=-1), dim=-1) > p.top_p  # [L, V]
            cut[:, 1:] = cut[:, :-1].clone()  # an id is cut when the ids before it already pass top_p
            cut[:, 0] = False
            z = z.masked_fill(torch.zeros_like(cut).scatter(-1, order, cut), least)
        if p.top_k:
            kth = torch.topk(z, min(p.top_k, z.shape[-1])).values[:, -1:]  # [L, 1]
            z = z.masked_fill(z < kth, least)
        u = torch.rand(z.shape, dtype=torch.float64, generator=generator).to(z.device)  # [L, V]
        return (z.double().exp() / (-torch.log(u)) ** p.temperature).argmax(dim=-1)

    @staticmethod
    def _verify(state: BlockState, cur: int, draft: torch.Tensor) -> torch.Tensor:
        """The verifier's float32 logits [L, V] for the draft positions (row i predicts position cur + i,
        from the committed tokens and draft[:i]; row 0 is never compared): a prefill of the context, the
        committed response and the draft at step 0, then the draft on its cache of the committed tokens."""
        model = state.models["verifier"]  # the engine's counted handle: `causal_step` is the platform's causal forward
        kv = state.sample_memory.get("verifier_kv")
        L = draft.shape[0]
        if kv is None:
            ids = torch.cat((state.context, state.tokens[:cur], draft.to(state.tokens.device)))[None]  # [1, T]
            T = ids.shape[1]
            out = model.causal_step(ids)
            rows = out.logits[0, T - L - 1:T - 1]  # [L, V]
        else:
            out = model.causal_step(draft[None], past=kv)
            rows = torch.cat((out.logits[0, :1], out.logits[0, :-1]))  # [L, V]: row 0 a stand-in, never compared
        state.sample_memory["verifier_kv"] = out.kv
        return rows
