"""A decode's settings (lengths, cache, stops, block alignment, sub-blocks) and their checks, without torch:
the engine decodes by them, and a driver validating a spec checks them before any model loads."""
from __future__ import annotations

from dataclasses import dataclass

from ...decoders.base import CACHE_NAMES
from ...errors import RippleError

BLOCK_ALIGNS = ("response", "absolute")


@dataclass(frozen=True)
class GenerationConfig:
    gen_length: int
    block_length: int
    cache: str = "none"
    stop_at_eos: bool = False  # stop after a block that committed EOS (earlier positions decoded)
    eos_early_stop: bool = False  # stop right after a decision that completes the response up to an EOS
    # for a block-diffusion family (blocks aligned to position 0, the last decoded in full), whose
    # gen_length need not be a multiple of block_length, as its reference allows
    block_aligned: bool = False
    # where blocks start: `response` (block b = response positions b*L..) or `absolute` (aligned to
    # position 0 as dInfer runs LLaDA: the first block holds the prompt's tail, the last is shorter).
    # Block-diffusion families are always aligned to 0.
    block_align: str = "response"
    # sub-blocks (Fast-dLLM v2's small blocks): decoders commit inside the current sub-block of this
    # length, left to right; None: the block length (no sub-blocks)
    sub_block_length: int | None = None

    def __post_init__(self):
        if self.block_align not in BLOCK_ALIGNS:
            raise RippleError(f"unknown block alignment {self.block_align!r}; accepted: {', '.join(BLOCK_ALIGNS)}")
        if self.block_align == "absolute":
            object.__setattr__(self, "block_aligned", True)  # any gen_length: the last block is cut short
        if self.gen_length <= 0 or self.block_length <= 0:
            raise RippleError(f"gen_length and block_length must be positive, got {self.gen_length} and {self.block_length}")
        if self.gen_length % self.block_length and not self.block_aligned:
            raise indivisible(self.gen_length, self.block_length)
        if self.cache not in CACHE_NAMES:
            raise RippleError(f"unknown cache policy {self.cache!r}; accepted: {', '.join(CACHE_NAMES)}")
        check_sub_block(self.sub_block_length, self.block_length)

    @property
    def sub_block(self) -> int:
        """The sub-block length in effect (the block length when none is set)."""
        return self.block_length if self.sub_block_length is None else self.sub_block_length


def check_sub_block(sub_block_length: int | None, block_length: int) -> None:
    """A sub-block length must divide the block length (so the block is whole sub-blocks), from 1 to it."""
    if sub_block_length is None:
        return
    whole = isinstance(sub_block_length, int) and not isinstance(sub_block_length, bool)
    if not whole or not 1 <= sub_block_length <= block_length or block_length % sub_block_length:
        divisors = [d for d in range(1, block_length + 1) if block_length % d == 0]
        raise RippleError(f"sub_block_length {sub_block_length!r} does not divide block_length {block_length}; "
                          f"accepted: {', '.join(map(str, divisors))}")


def indivisible(gen_length: int, block_length: int) -> RippleError:
    divisors = (d for d in range(1, gen_length + 1) if gen_length % d == 0)
    return RippleError(f"gen_length {gen_length} is not divisible by block_length {block_length}; "
                       f"accepted block lengths: {', '.join(map(str, divisors))}")
