"""KV cache policies, one module each, chosen by `GenerationConfig.cache` (DESIGN.md section 3).

With the block [bs, be) and a forward's canvas [0, extent), a step's forward recomputes:
  none   -> [0, extent)    nothing stored                                   (none.py)
  prefix -> [bs, extent)   keys before the block from the block opening     (prefix.py)
  dual   -> [bs, be)       keys before and after it from the block opening  (dual.py)
  sliding -> [c - W + 1, first mask + M)  one row's own keys before it, stale (sliding.py; APD's decoder only)
A policy is orthogonal to the decoder: it owns its windows and the keys it keeps (base.py), the
run's block loop asks it (ripple/platform/runtime/engine.py). A new policy is one more module
here and one more entry in POLICIES (and its name in ripple/decoders/base.py's CACHE_NAMES; in
CACHE_POLICIES too if every block decoder runs under it).
"""
from __future__ import annotations

from ....errors import RippleError
from .base import NO_NARROWING, CachePolicy, Window  # noqa: F401  (the package's names)
from .dual import DualCache
from .none import NoCache
from .prefix import PrefixCache
from .sliding import SlidingCache

POLICIES: dict[str, type[CachePolicy]] = {p.name: p for p in (NoCache, PrefixCache, DualCache, SlidingCache)}


def cache_policy(name: str) -> type[CachePolicy]:
    """The policy called `name`; an unknown name is refused in one line naming the accepted ones."""
    if name not in POLICIES:
        raise RippleError(f"unknown cache policy {name!r}; accepted: {', '.join(POLICIES)}")
    return POLICIES[name]
