"""Decoders by name, with a "did you mean" for unknown names. Built-in modules register at import;
decoders of other distributions join through the `ripple.decoders` entry points when the registry is
first read (ripple/plugins.py): built-ins win, a broken plugin is refused only when asked for."""
from __future__ import annotations

import dataclasses
import difflib
import re

from ..errors import RippleError
from ..plugins import DECODER_GROUP, BrokenPlugin, PluginGroup, PluginSource
from .base import Scheduler
from .params import HyperParams, field_kind

_REGISTRY: dict[str, type[Scheduler]] = {}
# a registered name: letters, digits, `_`, `.` and `-` (a local decoder's label, `local:NAME`, never is one)
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
LOCAL = "local:"


def register(cls: type[Scheduler]) -> type[Scheduler]:
    if cls.name in _REGISTRY:
        raise ValueError(f"decoder {cls.name!r} registered twice")
    if not NAME.match(cls.name):
        raise ValueError(f"decoder name {cls.name!r} is not of letters, digits, '_', '.' and '-'")
    _REGISTRY[cls.name] = cls
    if cls.Params is not HyperParams and "decoder_name" not in vars(cls.Params):  # errors name the decoder
        cls.Params.decoder_name = cls.name
    return cls


def is_registered(decoder: Scheduler | type[Scheduler]) -> bool:
    """Whether `decoder` (an instance or a class) is the class registered under its name."""
    cls = decoder if isinstance(decoder, type) else type(decoder)
    PLUGINS.read()  # a plugin's class is registered when the entry points are first read
    return _REGISTRY.get(cls.name) is cls


def label(decoder: Scheduler | type[Scheduler]) -> str:
    """The name records and cell ids carry: a registered decoder's name, else `local:NAME` for a
    class defined in the caller's code (no registered name has a colon, so the two never collide)."""
    cls = decoder if isinstance(decoder, type) else type(decoder)
    return cls.name if is_registered(cls) else f"{LOCAL}{cls.name}"


def check_decoder_class(name: str, obj) -> None:
    """A usable decoder plugin: a concrete Scheduler subclass named `name` whose Params is a frozen
    HyperParams dataclass of number, text or on/off fields made with hp/choice/text/flag, valid at its defaults."""
    if not (isinstance(obj, type) and issubclass(obj, Scheduler)):
        raise TypeError(f"{obj!r} is not a subclass of ripple.decoders.Scheduler")
    if getattr(obj, "__abstractmethods__", None):
        raise TypeError(f"{obj.__qualname__} does not implement {', '.join(sorted(obj.__abstractmethods__))}")
    if not NAME.match(name):
        raise TypeError(f"decoder name {name!r} is not of letters, digits, '_', '.' and '-'")
    if getattr(obj, "name", None) != name:
        raise TypeError(f"{obj.__qualname__}.name is {getattr(obj, 'name', None)!r}, not the entry point's {name!r}")
    if getattr(obj, "noise", None) not in ("mask", "uniform"):
        raise TypeError(f"{obj.__qualname__}.noise is {getattr(obj, 'noise', None)!r}; accepted: mask, uniform")
    params = getattr(obj, "Params", None)
    if not (isinstance(params, type) and issubclass(params, HyperParams) and dataclasses.is_dataclass(params)):
        raise TypeError(f"{obj.__qualname__}.Params is not a HyperParams dataclass")
    if not params.__dataclass_params__.frozen:
        raise TypeError(f"{params.__qualname__} is not frozen")
    for f in dataclasses.fields(params):
        if "lo" not in f.metadata or field_kind(f) not in (int, float, str, bool):
            raise TypeError(f"{params.__qualname__}.{f.name} is not declared with hp(), choice(), flag() or text()")
    params.decoder_name = name
    params()  # the defaults pass the dataclass's own checks


PLUGINS = PluginGroup(DECODER_GROUP, "decoder", check_decoder_class, lambda: set(_REGISTRY),
                      lambda name, cls: register(cls))


def names() -> list[str]:
    """Registered decoder names in display order (each class's `display_order`, then name)."""
    PLUGINS.read()
    return sorted(_REGISTRY, key=lambda n: (_REGISTRY[n].display_order, n))


def get(name: str) -> type[Scheduler]:
    refusal = PLUGINS.refusal(name, _REGISTRY)  # a plugin that took a built-in's name loses to it
    if refusal is not None:
        raise refusal
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RippleError(f"unknown decoder {name!r}{hint}; registered: {', '.join(names())}")
    return _REGISTRY[name]


def local_source(cls: type[Scheduler]) -> str:
    """Where a local decoder's code comes from, for its records and cell ids: its module, its qualified
    name and a digest of its source (of its code objects where no source is at hand), so a changed
    class never resumes the cells of the old one."""
    import hashlib
    import inspect

    try:
        text = inspect.getsource(cls)
    except (OSError, TypeError):
        text = repr(sorted((k, _code_text(v)) for k, v in vars(cls).items() if not k.startswith("__")))
    return f"local {cls.__module__}.{cls.__qualname__} sha256:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def _code_text(value) -> str:
    """A function's bytecode, names and constants (nested code included), without file or line."""
    value = getattr(value, "__func__", value)  # a classmethod or staticmethod
    code = value if hasattr(value, "co_code") else getattr(value, "__code__", None)
    if code is None:
        return repr(value) if isinstance(value, (int, float, str, bool, tuple, type(None))) else type(value).__name__
    return repr((code.co_code, code.co_names, [_code_text(c) for c in code.co_consts]))


def refused() -> list[BrokenPlugin]:
    """Plugin decoders that could not be registered, with why."""
    return PLUGINS.refused()


def source(name: str) -> PluginSource | None:
    """The distribution and version of a plugin decoder; None for Ripple's own."""
    return PLUGINS.source(name)


def build(name: str, settings: dict[str, str] | None = None) -> Scheduler:
    """A decoder from its name and `--set` strings."""
    cls = get(name)
    return cls(cls.Params.from_strings(name, settings or {}))


def decoders_for(noise: str, cache: str | None = None) -> list[str]:
    """Registered decoders that decode `noise` families ("mask" or "uniform"), in display order; with `cache`,
    those that run under that cache policy (`apd` runs under `sliding` only, the block decoders never do)."""
    return [n for n in names()
            if _REGISTRY[n].noise == noise and (cache is None or cache in _REGISTRY[n].supported_caches)]


# what `ripple generate` / `ripple eval` and `ripple.generate` / `ripple.evaluate` run when no decoder is
# named: Ripple's headline decoder, on the families it can decode (`default_decoder`)
DEFAULT_DECODER = "rps"


def default_decoder(noise: str) -> str:
    """The decoder a call naming none runs on a `noise` family: DEFAULT_DECODER where it decodes that kind
    of family, else the first built-in one that does (renoise on uniform noise), so a call without a
    decoder runs on every family; a plugin never becomes the default by installing itself."""
    if get(DEFAULT_DECODER).noise == noise:
        return DEFAULT_DECODER
    own = [n for n in decoders_for(noise) if source(n) is None]
    if not own:
        raise RippleError(f"no built-in decoder decodes {noise}-noise families; name one with --decoder")
    return own[0]


def check_noise(decoder: str | Scheduler, family: str, noise: str) -> None:
    """Refuse, in one line naming what the model needs, a decoder (a registered name or a Scheduler)
    made for another kind of family (a mask decoder on a uniform-noise family, a renoising decoder on
    a mask family)."""
    own = get(decoder).noise if isinstance(decoder, str) else decoder.noise
    if own == noise:
        return
    fitting = ", ".join(decoders_for(noise)) or "none registered"
    name = decoder if isinstance(decoder, str) else decoder.name
    raise RippleError(f"decoder {name!r} decodes {own}-noise families; {family} is a {noise}-noise family: "
                      f"use a {noise}-noise decoder ({fitting})")


# what a decoder declares and the engine acts on (ripple/decoders/base.py), as `ripple decoders` lists it
PROPERTIES = ("uses_lookahead", "uses_shadow", "needs_rows_beyond_block", "edits_tokens", "shortens_canvas",
              "defers_masks", "decides_first_position", "idle_steps", "follows_reference", "supported_caches")


def catalogue() -> list[dict]:
    """Every registered decoder (provider, declared properties, hyperparameters with defaults, ranges,
    search spaces and help), then every refused plugin with why: `ripple decoders --json`."""
    from .params import public_name, range_text

    rows = []
    for name in names():
        cls = _REGISTRY[name]
        plugin = source(name)
        props = {p: getattr(cls, p) for p in PROPERTIES}
        hps = [{"name": public_name(f), "default": f.default, "accepted": range_text(f.metadata, field_kind(f)),
                "search": list(f.metadata["search"]) if f.metadata.get("search") else None,
                "doc": f.metadata.get("doc", "")} for f in dataclasses.fields(cls.Params)]
        rows.append({"decoder": name, "provider": "built-in" if plugin is None else str(plugin),
                     "properties": {k: list(v) if isinstance(v, tuple) else v for k, v in props.items()},
                     "hyperparameters": hps})
    return rows + [{"decoder": b.name, "provider": str(b.source), "refused": b.error} for b in refused()]
