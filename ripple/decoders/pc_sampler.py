"""`pc_sampler`: PC-Sampler (position-aware calibration of decoding bias; NEUIR/PC-Sampler 8b106b0,
`src/generate.py`, `generate_with_pc_sampler`).

A block of B positions gets s = steps / blocks forwards and commits a fixed quota per step: B // s,
plus one for the first B mod s steps (`step_quota`). Which positions: the quota's highest scores
exp(-lambda * j) * min(-p * ln(f(x0) + 1e-9), alpha) over the block's masked positions, j the offset
from the block start (the positional term restarts every block), p the softmax probability of x0
(the argmax over the whole vocabulary) in the logits' dtype, and f a token-frequency prior: the
calibration rewards tokens a reference corpus lacks, against the trivial tokens a dLLM's confidence
favours. The prior is data (`prior=PATH`, the authors' JSON: {"num_token": N, "p_baseline_dict":
{id: count}}; f = count / N, absent ids 1 / N, float32); by default the one shipped with the model
(`pc_sampler_prior.json` in its folder), built by `ripple prior`. A model that ships none is
calibrated with a uniform prior (f = 1 / V: the position-aware rule alone), and one warning says so.

Departures: a position whose x0 is the mask id stays masked in the reference and still takes its
share of the quota; Ripple takes the quota from the other positions (and, if none is left, commits
the most confident other token), so no mask id is committed. Steps past the block's last mask are
forwards the reference makes on a full block; Ripple makes none (NFE = steps where each block's
quota fills it on its last step, as at the defaults).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..lazy import torch
from ..errors import RippleError
from .base import BlockState, Commit, Plan, RunShape, Scheduler, check_block_steps, most_confident
from .params import HyperParams, hp, text
from .registry import register

PRIOR_FILE = "pc_sampler_prior.json"  # the prior shipped in a model's folder
EPS = 1e-9  # the authors' floor inside the log


@dataclass(frozen=True)
class PCSamplerParams(HyperParams):
    lam: float = hp(0.25, 0.0, None, name="lambda", doc="position decay: scores are scaled by exp(-lambda * offset)",
                    search=(0.0, 1.0))
    alpha: float = hp(10.0, 0.0, None, lo_open=True, doc="clip of the calibrated confidence -p ln f(x0)",
                      search=(1.0, 10.0))
    steps: int = hp(0, 0, None, doc="forwards in all, divided evenly among the blocks (0: block_length per block, "
                    "one token per step)")
    prior: str = text("", doc="token-frequency prior (the authors' JSON); empty: the model's pc_sampler_prior.json")


@lru_cache(maxsize=None)
def _warn_uniform(model: str) -> None:
    """Once per model and process."""
    logging.getLogger(__name__).warning(
        "pc_sampler: %s ships no %s; calibrating with a uniform prior (build one with `ripple prior` and pass "
        "--set prior=PATH)", model, PRIOR_FILE)


@lru_cache(maxsize=8)
def load_prior(path: str, vocab_size: int) -> torch.Tensor:
    """f over the vocabulary [V] float32 from the authors' JSON, checked (one line on any fault)."""
    where = Path(path)
    if not where.is_file():
        raise RippleError(f"pc_sampler prior {path!r} does not exist; build one with `ripple prior` or pass prior=PATH")
    try:
        data = json.loads(where.read_text())
        total = data["num_token"]
        counts = {int(k): v for k, v in data["p_baseline_dict"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RippleError(f"pc_sampler prior {path!r} is malformed ({type(exc).__name__}: {exc}); expected JSON "
                          '{"num_token": N, "p_baseline_dict": {"id": count, ...}}') from None
    if isinstance(total, bool) or not isinstance(total, int) or total < 1 or any(
            isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts.values()):
        raise RippleError(f"pc_sampler prior {path!r} is malformed: num_token and the counts must be whole numbers "
                          "(num_token >= 1)")
    declared = data.get("vocab_size")
    if (declared is not None and declared != vocab_size) or (counts and max(counts) >= vocab_size) \
            or (counts and min(counts) < 0):
        size = declared if declared is not None else f"ids up to {max(counts)}"
        raise RippleError(f"pc_sampler prior {path!r} is for another vocabulary ({size}); this model has "
                          f"{vocab_size} ids: build its prior with `ripple prior`")
    f = torch.full((vocab_size,), 1.0 / total, dtype=torch.float32)
    if counts:
        ids = torch.tensor(list(counts))
        f[ids] = torch.tensor([counts[i] / total for i in counts.keys()], dtype=torch.float32)
    return f


def count_prior(token_lists, vocab_size: int, source: str = "") -> dict:
    """The authors' prior from tokenised texts (their calculate_p_baseline.py: every token of every text
    counted), in the JSON their `load_baseline` reads, plus the vocabulary size it was built for."""
    counts: dict[int, int] = {}
    total = 0
    for ids in token_lists:
        for i in ids:
            counts[i] = counts.get(i, 0) + 1
        total += len(ids)
    if total == 0:
        raise RippleError("no tokens to count: the prior's texts are empty")
    return {"num_token": total, "p_baseline_dict": {str(i): counts[i] for i in sorted(counts)},
            "vocab_size": vocab_size, "source": source}


@register
class PCSampler(Scheduler):
    name = "pc_sampler"
    display_order = 63
    Params = PCSamplerParams

    def prepare(self, shape: RunShape) -> None:
        check_block_steps("pc_sampler", self.params.steps, shape)
        # the run's prior (configuration, not sample state: every generate call sets it anew)
        path = self._prior_path(shape)
        self._prior = load_prior(path, shape.vocab_size) if path else torch.full(
            (shape.vocab_size,), 1.0 / shape.vocab_size, dtype=torch.float32)

    def _prior_path(self, shape: RunShape) -> str | None:
        """The prior file to read, or None: the model ships none and no path was given."""
        if self.params.prior:
            return self.params.prior
        if shape.model_dir and (Path(shape.model_dir) / PRIOR_FILE).is_file():
            return str(Path(shape.model_dir) / PRIOR_FILE)
        _warn_uniform(shape.model_dir or "this model")
        return None

    def step(self, state: BlockState) -> Plan:
        L = state.tokens.shape[0]
        memo = state.memory
        if memo.get("window") != state.window:  # the block's schedule (each sub-block's), fixed at its start
            per_block = self.params.steps // state.n_blocks if self.params.steps else L
            masks = int(state.masked.sum())
            memo.update(window=state.window, i=0, quota=[masks // per_block + (1 if i < masks % per_block else 0)
                                                         for i in range(per_block)])
        quota, i = memo["quota"], memo["i"]
        memo["i"] += 1
        k = quota[i] if i < len(quota) else 1
        logits = state.logits
        f = self._prior.to(logits.device)  # [V] float32
        x0 = logits.argmax(dim=-1)  # [L]
        p = torch.softmax(logits, dim=-1).gather(-1, x0[:, None]).squeeze(-1)  # [L], the logits' dtype
        calibrated = torch.clamp(-p.float() * torch.log(f[x0] + EPS), max=self.params.alpha)  # [L] float32
        decay = torch.exp(-self.params.lam * torch.arange(L, dtype=torch.float32, device=logits.device))  # [L]
        cand = state.masked & (x0 != state.mask_id)
        score = torch.where(cand, decay * calibrated, torch.full_like(calibrated, float("-inf")))
        if not bool(cand.any()):  # every masked x0 is the mask id: one other token, so the block ends
            return Plan(most_confident(state))
        pos = torch.topk(score, min(k, int(cand.sum()))).indices.sort().values  # written in position order
        return Plan(Commit(pos, x0[pos]))
