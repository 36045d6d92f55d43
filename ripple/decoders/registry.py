"""Decoders by name, with a "did you mean" for unknown names."""
from __future__ import annotations

import difflib

from ..errors import RippleError
from .base import Scheduler

_REGISTRY: dict[str, type[Scheduler]] = {}


def register(cls: type[Scheduler]) -> type[Scheduler]:
    if cls.name in _REGISTRY:
        raise ValueError(f"decoder {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    if "decoder_name" not in vars(cls.Params):  # errors name the decoder, not its dataclass
        cls.Params.decoder_name = cls.name
    return cls


def names() -> list[str]:
    """Registered decoder names in display order (each class's `display_order`, then name)."""
    return sorted(_REGISTRY, key=lambda n: (_REGISTRY[n].display_order, n))


def get(name: str) -> type[Scheduler]:
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RippleError(f"unknown decoder {name!r}{hint}; registered: {', '.join(names())}")
    return _REGISTRY[name]


def build(name: str, settings: dict[str, str] | None = None) -> Scheduler:
    """A decoder from its name and `--set` strings."""
    cls = get(name)
    return cls(cls.Params.from_strings(name, settings or {}))
