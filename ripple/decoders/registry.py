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


def decoders_for(noise: str) -> list[str]:
    """Registered decoders that decode `noise` families ("mask" or "uniform"), in display order."""
    return [n for n in names() if _REGISTRY[n].noise == noise]


def check_noise(decoder: str, family: str, noise: str) -> None:
    """Refuse, in one line naming what the model needs, a decoder made for another kind of family
    (a mask decoder on a uniform-noise family, a renoising decoder on a mask family)."""
    own = get(decoder).noise
    if own == noise:
        return
    fitting = ", ".join(decoders_for(noise)) or "none registered"
    raise RippleError(f"decoder {decoder!r} decodes {own}-noise families; {family} is a {noise}-noise family: "
                      f"use a {noise}-noise decoder ({fitting})")
