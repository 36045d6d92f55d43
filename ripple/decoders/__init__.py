"""Decoders ("schedulers"): the protocol, its registry and one module per decoder.

Every module of this package is imported here, and a decoder registers itself with
`@register`: adding a decoder is adding one file (listings follow each class's `display_order`).
"""
import importlib
import pkgutil

from .base import (  # noqa: F401
    BlockState, Commit, Lookahead, Plan, Resolution, RunShape, Scheduler, CACHE_NAMES, CACHE_POLICIES)
from .registry import (  # noqa: F401
    DEFAULT_DECODER, build, check_noise, decoders_for, default_decoder, get, is_registered, label, names, register)

_INFRASTRUCTURE = {"base", "params", "registry"}
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in _INFRASTRUCTURE and not _module.startswith("_"):
        importlib.import_module(f"{__name__}.{_module}")
