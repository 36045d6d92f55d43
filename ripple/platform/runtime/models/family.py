"""The family registry: how one checkpoint format maps onto `DiffusionTransformer`."""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ....errors import RippleError

if TYPE_CHECKING:  # the modules are imported at build time: a family is declared without torch
    from torch import nn

NOISES = ("mask", "uniform")
# which ids end a response (the engine's stops and its "generated tokens"), by name: `every`
# end-of-sequence or end-of-turn id that config.json, generation_config.json and the tokenizer name;
# `config`, config.json's eos_token_id alone; `generation_config`, that file's eos_token_id list alone.
# A rule whose file names no id falls back to `every` (ripple/platform/runtime/loading.py applies them)
STOP_RULES = ("every", "config", "generation_config")


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]  # lower-cased `model_type` values that select this family
    shift: int  # 1 when the prediction for position i is the logits at i-1
    to_config: Callable[[dict[str, Any]], Any]  # config.json -> what `build` takes (a TransformerConfig by default)
    # checkpoint key -> our parameter name (None: not a parameter we use), or (name, index) when the
    # tensor fills the sub-tensor `param[index]` of a stacked parameter (MoE experts)
    rename: Callable[[str], str | tuple[str, tuple[int, ...]] | None]
    tied_head: Callable[[dict[str, Any]], bool]
    max_positions: Callable[[dict[str, Any]], int]
    # the block-opening forward commits the block's first position with its top-1 token (mask id
    # excluded) before the decoder's first step, as the family's reference block decoding does;
    # required when shift > 0, so that no later forward needs the row before the block
    opening_commit: bool = False
    # block diffusion (LLaDA2, SDAR): blocks aligned to absolute position 0 (the first decoded block may
    # hold the prompt's tail), a forward sees the canvas only up to the current block's end under
    # block-causal attention (query i sees key j iff j // B <= i // B in positions), and the last
    # block is decoded in full even past prompt + gen_length (ripple/platform/runtime/engine.py)
    block_causal: bool = False
    # decoding ends after a block that leaves an end-of-sequence token in the response, whatever
    # the run's stop_at_eos setting, as the family's reference generate does
    stops_at_eos: bool = False
    # with the run's stop_at_eos, a row ends as soon as its response holds an end-of-sequence token
    # with no mask before it (checked after every decision, the block-opening commit included), as
    # the family's reference generate does (Fast-dLLM v2), instead of after the block
    eos_stops_mid_block: bool = False
    # with a cache, the prompt's whole blocks get a forward of their own before the first block opens
    # (their keys stored; the opening then computes the block against them), as the family's reference
    # prefills them (Fast-dLLM v2): a prompt ending inside a block costs that forward, which yields no token
    prefills_prompt_blocks: bool = False
    # what a canvas starts from: "mask" (every position the mask id; mask decoders commit tokens) or
    # "uniform" (random tokens that a renoising decoder denoises: DiffusionGemma); the engine's mask
    # decoders refuse a uniform-noise family, whose checkpoints have no mask id
    noise: str = "mask"
    # the family's own module class, built as module(cfg, family=name, noise=noise) from `to_config`'s
    # result; None: DiffusionTransformer with the mask-decoding properties above
    # ("package.module:Class" names it without importing it, so a family is declared without torch)
    module: Callable[..., nn.Module] | str | None = None
    # ids a user's prompt may not hold, read from config.json: {id: (what it is, why it is refused)}.
    # Only the prompt is checked (before any weights load, and at the encoder's prompt columns); tokens
    # the model generated are text whatever their id, under every cache
    prompt_refusals: Callable[[dict[str, Any]], dict[int, tuple[str, str]]] = lambda cfg: {}
    # the ids that end a response (a name in STOP_RULES): those the family's reference generate stops
    # on, so a token it treats as text never ends a Ripple response early (Fast-dLLM v2: `config`)
    stop_ids: str = "every"
    # a causal (autoregressive) LM, not a diffusion LM: it has no mask id, the loader builds it only
    # through `load_causal` (ripple/platform/runtime/causal.py: a verifier's next-token logits) and
    # every decoding path refuses it in one line
    causal: bool = False

    def __post_init__(self):
        if self.stop_ids not in STOP_RULES:
            raise ValueError(f"family {self.name!r}: stop_ids {self.stop_ids!r} is unknown; "
                             f"accepted: {', '.join(STOP_RULES)}")
        if self.prefills_prompt_blocks and not self.block_causal:
            raise ValueError(f"family {self.name!r}: prefills_prompt_blocks needs block_causal (whole blocks)")
        if self.shift not in (0, 1) or (self.shift and not self.opening_commit):
            raise ValueError(f"family {self.name!r}: shift {self.shift} needs opening_commit (supported shifts: 0, 1)")
        if self.noise not in NOISES:
            raise ValueError(f"family {self.name!r}: noise {self.noise!r} is unknown; accepted: {', '.join(NOISES)}")
        if self.causal and (self.module is not None or self.shift or self.opening_commit or self.block_causal
                            or self.stops_at_eos or self.eos_stops_mid_block or self.prefills_prompt_blocks):
            raise ValueError(f"family {self.name!r}: a causal family declares none of the mask engine's properties")
        if self.noise != "mask" and (self.module is None or self.shift or self.opening_commit
                                     or self.block_causal or self.stops_at_eos
                                     or self.eos_stops_mid_block or self.prefills_prompt_blocks):
            raise ValueError(f"family {self.name!r}: a {self.noise}-noise family brings its own module and "
                             f"declares none of the mask engine's properties")

    def build(self, cfg: Any) -> nn.Module:
        """The module for `cfg`, carrying the family's decoding properties for the engine."""
        if self.module is not None:
            module = self.module
            if isinstance(module, str):
                where, _, name = module.partition(":")
                module = getattr(importlib.import_module(where), name)
            return module(cfg, family=self.name, noise=self.noise)
        from .transformer import DiffusionTransformer

        return DiffusionTransformer(cfg, shift=self.shift, opening_commit=self.opening_commit,
                                    block_causal=self.block_causal, stops_at_eos=self.stops_at_eos,
                                    eos_stops_mid_block=self.eos_stops_mid_block,
                                    prefills_prompt_blocks=self.prefills_prompt_blocks, causal=self.causal)


_FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    for t in family.model_types:
        _FAMILIES[t] = family
    return family


def registered_families() -> list[str]:
    return sorted(_FAMILIES)


def diffusion_families() -> list[str]:
    """The model_type values a decoder can decode (every registered one but the causal LMs')."""
    return sorted(t for t, f in _FAMILIES.items() if not f.causal)


def causal_families() -> list[str]:
    """The model_type values of causal LMs (verifiers)."""
    return sorted(t for t, f in _FAMILIES.items() if f.causal)


def get_family(model_type: str) -> Family:
    fam = _FAMILIES.get(str(model_type).lower())
    if fam is None:
        raise RippleError(
            f"unsupported model_type {model_type!r} in config.json; supported: {', '.join(registered_families())}"
        )
    return fam


def renamer(block_key: str, block_names: dict[str, str], top_names: dict[str, str]) -> Callable[[str], str | None]:
    """Checkpoint key -> our name, from a per-layer regex (groups: layer, name, kind) and two tables."""
    pattern = re.compile(block_key)

    def rename(key: str) -> str | None:
        m = pattern.match(key)
        if m:
            layer, name, kind = m.groups()
            ours = block_names.get(name)
            return f"layers.{layer}.{ours}.{kind}" if ours else None
        return top_names.get(key)

    return rename


def refuse_prompt(family: str, ids, refusals: dict[int, tuple[str, str]]) -> None:
    """One line for the first refused id a prompt holds (`ids`: a sequence of ints or a tensor)."""
    if not refusals:
        return
    held = set(ids.reshape(-1).tolist()) if hasattr(ids, "reshape") else set(ids)
    for token, (what, why) in refusals.items():
        if token in held:
            raise RippleError(f"{family}: the prompt holds the {what} {token}; {why}")


def require(cfg: dict[str, Any], key: str) -> Any:
    if key not in cfg:
        raise RippleError(f"config.json lacks {key!r}, needed to build the {cfg.get('model_type')} model")
    return cfg[key]
