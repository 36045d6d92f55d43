"""`learn2pd`: Learn2PD, learned parallel decoding (Bao et al., arXiv 2509.25188; ims-kdks/Learning-to-
Parallel-Decoding, `llada/generate.py` at 342293c), exact against its loops as ../shared/golden/README.md
("Learn2PD") states them.

Per forward of a block: x0 = argmax over the whole vocabulary and p = its softmax probability at every
block position (committed ones included). A small trained filter (ripple/decoders/filters.py) reads p
over the block's B positions, float32, and accepts the masked positions where sigmoid(logit) > threshold
(compared in float32); on top, LLaDA's floor commits the k most probable masked positions, k from the
schedule fixed at the block's start (m masks over S = steps / blocks steps: m // S each, one more for
the first m % S) and indexed by the block's forward counter; the union takes x0. Ties of the floor
break as torch.topk breaks them on the vector the reference builds: p at the block's masked positions,
-inf elsewhere, as long as the forward's input (the canvas; the cache window), in its dtype.

End of text (`eot=true`): after the commit the canvas is cut for good after the first position the
filter accepted whose x0 is the end-of-text id, else after the most confident masked position whose
x0 is (lowest position on ties); the cut position stays. Later forwards see the shorter canvas and the
response is shorter than gen_length.

Caches select the reference's three loops:
- `none`: `generate_learn2parallel` / `generate_l2p_eot` (`generate` and `generate_predict_eot` with
  filter=none): p in the logits' dtype; EoT candidates are the masked positions of the whole canvas,
  later blocks included (the engine hands them over as `BlockState.rest`);
- `prefix`, `dual`: `generate_with_prefix_cache` / `generate_with_dual_cache`: p in float64 (their
  `get_transfer_index`), EoT candidates only in the current block; the engine's prefix and dual
  windows are the reference's (dual: after a cut the block's forwards still read the opening's cached
  keys of the removed suffix). The reference has these only with the filter and EoT; Ripple runs the
  same loop without them (filter=none: the floor alone; eot=false: no cut).

Float32 probabilities saturate at 1.0, so ties decide many commits and a softmax's last bit matters:
torch's CPU softmax sums in as many lanes as the machine's vectors hold, and the golden files were made
with 16 (AVX-512). Ripple computes float32 probabilities in that fixed order on every machine
(`softmax_like_reference`); on an 8-lane (AVX2) CPU torch.softmax would tie positions the reference
ranked apart (2 of the 40 public cases).

A width-free filter (Ripple's recipe, architecture `ripple`) reads instead the per-position features
its card names, computed by decoders/features.py from the forward's logits, the block's commit mask
and the step within the block, as `ripple learn label` computes them for training; it sees the block as it
stands (after a cut, only the positions left), so it needs no padding. Acceptance, floor and EoT rules
are the same.

Shipped filters: a model folder may ship one filter per recipe, `learn2pd_filter/` (Learn2PD's recipe) and
`learn2pd_filter_ripple/` (Ripple's); `filter=learn2pd` and `filter=ripple` pick the model's own, the empty
default is `learn2pd`. A model without the one asked for is refused in one line naming `ripple learn` (by a
grid before it starts: `artifacts` raises where the model's folder is known).

Where the reference stops: its filter takes exactly B inputs, so a block that a cut left shorter than B
while it still holds masks raises a shape error there. Ripple makes every forward before that point as
the reference does and then feeds the filter the block's p padded to B with zeros (the positions cut
away are no candidates), so every run ends complete. Other departures: a selected x0 that is the mask id
commits the most probable other token; a forward past the schedule (only if a block could not finish
in S forwards) commits at least one token.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import RippleError
from ..lazy import torch
from .base import BlockState, Commit, Plan, RunShape, Scheduler, check_block_steps, most_confident, top1
from .features import LANES, assemble, check_names, raw_columns, softmax_like_reference  # noqa: F401 (re-exported)
from .filters import NO_FILTER, file_sha256, get_architecture, load_filter, WEIGHTS_FILE
from .params import HyperParams, flag, hp, text
from .registry import register

SHIPPED = "learn2pd_filter"  # the filter a model ships in its folder (a `save_filter` directory): Learn2PD's recipe
# the filters a model may ship, by the recipe that trained them (`ripple learn train --recipe`): `filter=RECIPE`
# picks the model's own; the empty default is Learn2PD's (the paper's decoder)
SHIPPED_BY_RECIPE = {"learn2pd": SHIPPED, "ripple": f"{SHIPPED}_ripple"}
DEFAULT_RECIPE = "learn2pd"
FEATURES = ("confidence",)  # what the filter reads per block position: the argmax token's probability


@dataclass(frozen=True)
class Learn2PDParams(HyperParams):
    filter: str = text("", doc="the filter: learn2pd or ripple (the model's shipped filter of that recipe: "
                       "learn2pd_filter/, learn2pd_filter_ripple/), a directory from `ripple learn train` or a "
                       ".safetensors file; none: no filter (LLaDA's generate); empty: the model's learn2pd one")
    threshold: float = hp(0.96, 0.0, 1.0, doc="accept a masked position where sigmoid(filter logit) > threshold",
                          search=(0.8, 0.995))
    eot: bool = flag(False, doc="cut the canvas after a predicted end of text")
    steps: int = hp(0, 0, None, doc="forwards in all, divided evenly among the blocks (0: block_length per block)")


def shipped_recipe(params: Learn2PDParams) -> str | None:
    """The recipe whose shipped filter a configuration asks for (`filter` empty or a recipe name), else None."""
    if not params.filter:
        return DEFAULT_RECIPE
    return params.filter if params.filter in SHIPPED_BY_RECIPE else None


def shipped_filters(model_dir: str | None) -> dict[str, str]:
    """{recipe: directory} of the filters a model folder ships (an embedded model's assets, a local checkpoint)."""
    if not model_dir:
        return {}
    return {recipe: str(Path(model_dir) / folder) for recipe, folder in SHIPPED_BY_RECIPE.items()
            if (Path(model_dir) / folder / WEIGHTS_FILE).is_file()}


def no_shipped_filter(model_dir: str | None, recipe: str) -> RippleError:
    """The one line for a model that ships no filter of `recipe`."""
    return RippleError(f"learn2pd: {model_dir or 'this model'} ships no filter of recipe {recipe} "
                       f"({SHIPPED_BY_RECIPE[recipe]}/); train one with `ripple learn label` and `ripple learn train "
                       f"--recipe {recipe}` and pass --set filter=DIR, or filter=none (LLaDA's generate)")


def filter_path(params: Learn2PDParams, model_dir: str | None) -> str | None:
    """The filter file or directory a configuration reads: the model's shipped one of a recipe for
    `filter` empty (learn2pd), `learn2pd` or `ripple`; None for filter=none or when the model ships none
    of that recipe; else `filter` as a path (a directory named like a recipe: give it as ./ripple)."""
    if params.filter == NO_FILTER:
        return None
    recipe = shipped_recipe(params)
    if recipe is None:
        return params.filter
    return shipped_filters(model_dir).get(recipe)


@register
class Learn2PD(Scheduler):
    name = "learn2pd"
    display_order = 86
    Params = Learn2PDParams
    cuts_canvas = True
    checks_weights = True
    learned = True
    response_steps_params = ("steps",)

    @property
    def rows_to_end(self) -> bool:
        # end-of-text candidates run to the canvas end only in the cacheless loop
        return self.params.eot and getattr(self, "_cache", "none") == "none"

    @classmethod
    def artifacts(cls, params: HyperParams, model_dir: str | None) -> dict[str, str]:
        path = filter_path(params, model_dir)
        if path is None and model_dir and params.filter != NO_FILTER:
            raise no_shipped_filter(model_dir, shipped_recipe(params))  # a grid refuses the cell before it starts
        if path is None:
            return {}
        where = Path(path).expanduser()
        weights = where / WEIGHTS_FILE if where.is_dir() else where
        return {"filter": file_sha256(weights)} if weights.is_file() else {}

    def prepare(self, shape: RunShape) -> None:
        check_block_steps("learn2pd", self.params.steps, shape)
        # the run's configuration (never a sample's state): every generate call sets it anew
        self._cache, self._eos = shape.cache, tuple(shape.eos_ids)
        path = filter_path(self.params, shape.model_dir)
        if path is None and self.params.filter != NO_FILTER:
            raise no_shipped_filter(shape.model_dir, shipped_recipe(self.params))
        self._filter = load_filter(path, shape.block_length, shape.weights) if path else None
        self._width_free = self._filter is not None and not get_architecture(self._filter.card.architecture).fixed_width
        if self._width_free:  # it reads what decoders/features.py computes, by the names on its card
            check_names(self._filter.card.features, f"learn2pd: filter {path!r}")
        elif self._filter is not None and self._filter.card.features != FEATURES:
            raise RippleError(f"learn2pd: filter {path!r} reads {', '.join(self._filter.card.features)}; this decoder "
                              f"feeds its fixed-width filters {', '.join(FEATURES)}")

    def step(self, state: BlockState) -> Plan:
        L = state.tokens.shape[0]
        memo, sample = state.memory, state.sample_memory
        if "end" not in sample:  # the canvas end, in response positions (cuts shorten it): the last block's end
            sample.update(end=state.response_offset + state.n_blocks * L, blocks=state.n_blocks)
        if not memo:  # the block's schedule, fixed at its start
            per_block = self.params.steps // sample["blocks"] if self.params.steps else L
            m = int(state.block_masked.sum())
            memo.update(i=0, quota=[m // per_block + (1 if i < m % per_block else 0) for i in range(per_block)])
        i = memo["i"]
        memo["i"] += 1
        k = memo["quota"][i] if i < len(memo["quota"]) else 1
        cached = self._cache != "none"
        off = state.response_offset  # block position j is response position off + j
        inside = max(0, min(L, sample["end"] - off))  # block positions still on the canvas
        logits = state.logits  # [L, V]
        x0 = logits.argmax(dim=-1)  # [L], the mask id included
        p = (torch.softmax(logits.double(), dim=-1) if cached else softmax_like_reference(logits)) \
            .gather(-1, x0[:, None]).squeeze(-1)  # [L]: get_transfer_index's float64, else the logits' dtype
        masked = state.masked.clone()
        masked[inside:] = False
        accepted = torch.zeros_like(masked)
        if self._width_free and inside:  # the block as it stands (a cut shortens it): no padding
            cols = raw_columns(logits[:inside], state.masked[:inside])  # {name: [n]}, as `ripple learn label` stores
            feats = assemble(self._filter.card.features, {k: v[None] for k, v in cols.items()}, [state.step])  # [1, n, F]
            sig = torch.zeros(L, dtype=torch.float32)  # [L]: past a cut no candidate
            sig[:inside] = torch.sigmoid(self._filter.module(feats))[0]
            accepted = (sig.to(masked.device) > self.params.threshold) & masked
        elif self._filter is not None:
            feats = torch.zeros(1, self._filter.card.block_length or L, dtype=torch.float32)  # [1, B]: zeros past a cut
            feats[0, :inside] = p[:inside].float().cpu()
            sig = torch.sigmoid(self._filter.module(feats))[0, :L].to(masked.device)  # [L] float32
            accepted = (sig > self.params.threshold) & masked
        floor = self._floor(state, p, masked, k, inside)
        chosen = accepted | floor
        if not bool(chosen.any()):
            if not bool(masked.any()):
                return Plan()
            return Plan(most_confident(state))
        pos = chosen.nonzero().squeeze(-1)
        tokens = x0[pos]
        if bool((tokens == state.mask_id).any()):  # never commit the mask id: the best other token instead
            tokens = torch.where(tokens == state.mask_id, top1(state)[0][pos], tokens)
        info = {"k": k, "accepted": int(accepted.sum())}
        cut = self._cut(state, x0, p, accepted, masked, cached) if self.params.eot else None
        if cut is not None and off + cut < sample["end"]:
            sample["end"] = off + cut
            info["cut"] = off + cut  # the response's length after the cut
            return Plan(Commit(pos, tokens), truncate=cut, info=info)
        return Plan(Commit(pos, tokens), info=info)

    def _floor(self, state: BlockState, p: torch.Tensor, masked: torch.Tensor, k: int, inside: int) -> torch.Tensor:
        """The top-k floor [L] bool, from torch.topk over the reference's vector: p at the block's masked
        positions, -inf elsewhere, as long as the forward's input (ties depend on it below 64 entries)."""
        L = masked.shape[0]
        end = state.sample_memory["end"]
        if self._cache == "dual":
            start, n = 0, inside  # the window: the block up to the canvas end
        elif self._cache == "prefix":
            start, n = 0, end - state.response_offset  # the window: the block start to the canvas end
        else:
            start = state.prompt_length + state.response_offset  # the whole canvas
            n = state.prompt_length + end
        vec = torch.full((max(n, start + inside),), float("-inf"), dtype=p.dtype, device=p.device)
        vec[start:start + inside] = torch.where(masked[:inside], p[:inside], torch.full_like(p[:inside], float("-inf")))
        picked = torch.topk(vec, min(k, vec.numel())).indices - start  # [k] block positions
        floor = torch.zeros(L, dtype=torch.bool, device=masked.device)
        picked = picked[(picked >= 0) & (picked < L)]
        floor[picked] = True
        return floor & masked  # a pick among -inf entries writes nothing (the reference rewrites the same token)

    def _cut(self, state: BlockState, x0: torch.Tensor, p: torch.Tensor, accepted: torch.Tensor,
             masked: torch.Tensor, cached: bool) -> int | None:
        """The block offset where the canvas now ends, or None: after the first accepted end-of-text
        position, else after the most confident masked end-of-text candidate (the current block's
        under a cache, the whole canvas's otherwise), the lowest position on ties."""
        eos = torch.tensor(self._eos, dtype=x0.dtype, device=x0.device)
        ends = torch.isin(x0, eos)  # [L]
        first = (accepted & ends).nonzero()
        if first.numel():
            return int(first[0]) + 1
        conf = torch.where(masked & ends, p, torch.full_like(p, float("-inf")))  # [L]
        if not cached and state.rest is not None:  # masked positions after the block, to the canvas end
            rest_x0 = state.rest.argmax(dim=-1)  # [n]
            rest_p = softmax_like_reference(state.rest).gather(-1, rest_x0[:, None]).squeeze(-1).to(p.dtype)
            rest_ok = (state.rest_tokens == state.mask_id) & torch.isin(rest_x0, eos)
            conf = torch.cat((conf, torch.where(rest_ok, rest_p, torch.full_like(rest_p, float("-inf")))))
        if not bool(torch.isfinite(conf).any()):
            return None
        return int(torch.argmax(conf)) + 1
