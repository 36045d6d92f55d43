"""Hyperparameter dataclasses: one frozen dataclass per decoder is the single source for
CLI `--set` flags, Tune search spaces and MLflow params. Field metadata carries the range."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import RippleError

# a flag's spellings: YAML's true/false arrive as Python's True/False (`str` gives "True"/"False")
FLAG_WORDS = {"true": True, "false": False}


def hp(default, lo=None, hi=None, *, lo_open=False, hi_open=False, name=None, doc="", search=None, new=False):
    """A hyperparameter field with its accepted range [lo, hi] (open ends when *_open).

    `new`: added after result stores existed; at its default it is left out of cell ids
    (`HyperParams.id_neutral`), so the cells of those stores keep their ids."""
    meta = {"lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open, "name": name, "doc": doc, "search": search,
            "new": new}
    return field(default=default, metadata=meta)


def choice(default: str, options: tuple[str, ...], *, name=None, doc="", search=None):
    """A hyperparameter field taking one of `options` (strings), e.g. an ablation's rule."""
    if default not in options:
        raise ValueError(f"default {default!r} is not one of {options}")
    meta = {"choices": tuple(options), "lo": None, "hi": None, "lo_open": False, "hi_open": False, "name": name,
            "doc": doc, "search": search}
    return field(default=default, metadata=meta)


def flag(default: bool, *, name=None, doc="", new=False):
    """A hyperparameter that is on or off (`true`/`false` in specs and `--set`), e.g. an ablation's switch.
    `new` as for `hp`."""
    meta = {"flag": True, "lo": None, "hi": None, "lo_open": False, "hi_open": False, "name": name, "doc": doc,
            "search": None, "new": new}
    return field(default=bool(default), metadata=meta)


def text(default: str = "", *, name=None, doc=""):
    """A free-text hyperparameter (a file path, say): never searched, checked by its decoder."""
    meta = {"text": True, "lo": None, "hi": None, "lo_open": False, "hi_open": False, "name": name, "doc": doc,
            "search": None}
    return field(default=default, metadata=meta)


# what a second model beside the dLLM may be: `causal_lm`, a causal LM giving next-token logits (a verifier)
AUXILIARY_KINDS = ("causal_lm",)


def auxiliary(default: str = "", *, kind: str = "causal_lm", name=None, doc=""):
    """A hyperparameter naming a second model the decoder runs beside the dLLM (a checkpoint folder, a hub
    id or an embedded name), of `kind`. Declared, so the platform acts on it without knowing the decoder:
    workers load the model once and hand it over (ripple/platform/runtime/auxiliary.py), records carry its
    weights digest, the load report counts its bytes. Empty: no model."""
    if kind not in AUXILIARY_KINDS:
        raise ValueError(f"auxiliary model kind {kind!r}; accepted: {', '.join(AUXILIARY_KINDS)}")
    meta = {"text": True, "auxiliary": kind, "lo": None, "hi": None, "lo_open": False, "hi_open": False,
            "name": name, "doc": doc, "search": None}
    return field(default=default, metadata=meta)


def range_text(meta: dict, kind: type) -> str:
    if meta.get("text"):
        return "any text"
    if meta.get("flag"):
        return "true or false"
    if meta.get("choices"):
        return f"one of {', '.join(meta['choices'])}"
    lo, hi = meta["lo"], meta["hi"]
    left = "(" if meta["lo_open"] else "["
    right = ")" if meta["hi_open"] else "]"
    lo_s = "-inf" if lo is None else repr(lo)
    hi_s = "inf" if hi is None else repr(hi)
    return f"{kind.__name__} in {left}{lo_s}, {hi_s}{right}"


@dataclass(frozen=True)
class HyperParams:
    """Base class. Subclasses declare fields with `hp(...)`; values are checked on creation."""

    decoder_name: ClassVar[str | None] = None  # set by the registry, names the decoder in errors

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            kind = field_kind(f)
            meta = f.metadata
            pub = public_name(f)
            ok = isinstance(value, bool) if kind is bool else isinstance(value, kind) and not isinstance(value, bool)
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))
                value, ok = float(value), True
            if ok and kind is float and not math.isfinite(value):
                ok = False
            if ok and meta.get("choices"):
                ok = value in meta["choices"]
            lo, hi = meta.get("lo"), meta.get("hi")
            if ok and lo is not None:
                ok = value > lo if meta.get("lo_open") else value >= lo
            if ok and hi is not None:
                ok = value < hi if meta.get("hi_open") else value <= hi
            if not ok:
                owner = getattr(type(self), "decoder_name", None) or type(self).__name__.removesuffix("Params").lower()
                raise RippleError(
                    f"{owner or 'decoder'} hyperparameter "
                    f"{pub}={value!r} is invalid; accepted: {range_text(meta, kind)}"
                )

    @classmethod
    def fields_by_name(cls) -> dict[str, dataclasses.Field]:
        return {public_name(f): f for f in dataclasses.fields(cls)}

    @classmethod
    def from_strings(cls, decoder: str, pairs: dict[str, str]) -> "HyperParams":
        """Parse `--set key=value` strings; unknown keys name the accepted ones."""
        fields = cls.fields_by_name()
        kwargs: dict[str, Any] = {}
        for key, raw in pairs.items():
            if key not in fields:
                accepted = ", ".join(fields) or "(none)"
                raise RippleError(f"decoder {decoder!r} has no hyperparameter {key!r}; accepted: {accepted}")
            f = fields[key]
            kind = field_kind(f)
            if kind is bool:
                value = FLAG_WORDS.get(str(raw).strip().lower())
                if value is None:
                    raise RippleError(f"{decoder} hyperparameter {key}={raw!r} is invalid; accepted: true or false")
                kwargs[f.name] = value
                continue
            try:
                value = int(raw, 10) if kind is int else kind(raw)
            except ValueError:
                raise RippleError(
                    f"{decoder} hyperparameter {key}={raw!r} is not a number; accepted: {range_text(f.metadata, kind)}"
                ) from None
            kwargs[f.name] = value
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {public_name(f): getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def auxiliary_fields(cls) -> dict[str, str]:
        """Hyperparameters that name a second model (`auxiliary` fields) -> the kind of model each needs."""
        return {public_name(f): f.metadata["auxiliary"] for f in dataclasses.fields(cls) if f.metadata.get("auxiliary")}

    def auxiliary_models(self) -> dict[str, str]:
        """The second models this configuration names: hyperparameter -> model (empty values left out)."""
        return {k: v for k, v in self.to_dict().items() if k in self.auxiliary_fields() and v}

    @classmethod
    def id_neutral(cls) -> dict[str, Any]:
        """Hyperparameters added later (`hp(new=True)`) -> their defaults: at that value a cell id omits them."""
        return {public_name(f): f.default for f in dataclasses.fields(cls) if f.metadata.get("new")}


def public_name(f: dataclasses.Field) -> str:
    return f.metadata.get("name") or f.name


def field_kind(f: dataclasses.Field) -> type:
    """float, int, str (a `choice` field) or bool (a `flag` field)."""
    return f.type if isinstance(f.type, type) else {"float": float, "int": int, "str": str,
                                                    "bool": bool}.get(str(f.type), float)
