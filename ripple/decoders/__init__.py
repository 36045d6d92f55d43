"""Decoders ("schedulers"): the protocol, its registry and one module per decoder."""
from .base import BlockState, Commit, Lookahead, Plan, Resolution, Scheduler, CACHE_POLICIES  # noqa: F401
from .registry import build, get, names, register  # noqa: F401
from . import default, confidence, klass, eb_sampler, wino, lopa, rps  # noqa: F401  (register in display order)
