"""Cache policy `none`: every forward recomputes the whole canvas its family sees, [0, extent).
Nothing is stored; a step reads no key from an earlier forward, so decoding is what a model's
reference loop computes with no cache at all."""
from __future__ import annotations

from .base import CachePolicy


class NoCache(CachePolicy):
    name = "none"
    stores_keys = False
    recomputes_context = True

    def window(self, bs: int, be: int, ext: int) -> tuple[int, int]:
        return 0, ext
