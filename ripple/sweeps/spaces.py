"""Search spaces derived from a decoder's hyperparameter dataclass.

The dataclass (`ripple/decoders/params.py`) is the single source of truth: its field
types decide the kind of space (int -> integer, float -> uniform), its `search=(lo, hi)`
metadata gives the default range, and its accepted range validates every override, so
a sweep can never propose a value the decoder would reject halfway through a run.

Override forms accepted per hyperparameter (a sweep spec's `space:` mapping):
    lambda:                       # the dataclass's search range
    lambda: [0.0, 0.1, 0.2]       # these values (grid points / a categorical choice)
    k_max: {lo: 2, hi: 20}        # a range (ints stay ints); `log: true` for log-uniform
    tau: {lo: 0.6, hi: 0.95, points: 4}   # a range, 4 evenly spaced points under grid search
    tau: 0.9                      # fixed, not searched
    order: [entropy, confidence]  # a choice hyperparameter: its values (None: all of them), or one fixed
    carry: [true, false]          # an on/off hyperparameter (a flag): likewise
"""
from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import RippleError
from ..decoders.params import HyperParams, field_kind

SEARCHES = ("grid", "random", "optuna")
DEFAULT_POINTS = 3  # grid points for a range given without values
RANGE_KEYS = ("lo", "hi", "values", "log", "points")


@dataclass(frozen=True)
class Dimension:
    """One searched hyperparameter: a range [lo, hi] or explicit values, of the field's type."""

    name: str  # public name (`lambda`, not the field name `lam`)
    kind: type  # int, float, str (a choice field) or bool (a flag field)
    lo: float | int | None = None
    hi: float | int | None = None
    values: tuple | None = None
    log: bool = False
    points: int = DEFAULT_POINTS

    def grid_values(self) -> list:
        """The values a grid search visits: the explicit ones, else `points` evenly spaced (ints deduplicated)."""
        if self.values is not None:
            return list(self.values)
        n = max(1, self.points)
        if n == 1:
            raw = [self.lo]
        elif self.log:
            raw = [math.exp(math.log(self.lo) + i * (math.log(self.hi) - math.log(self.lo)) / (n - 1)) for i in range(n)]
        else:
            raw = [self.lo + i * (self.hi - self.lo) / (n - 1) for i in range(n)]
        out = [int(round(v)) if self.kind is int else _tidy(v) for v in raw]
        return list(dict.fromkeys(out))

    def domain(self, search: str):
        """The Ray Tune domain for `search` (grid, random, optuna)."""
        from ray import tune

        if search == "grid":
            return tune.grid_search(self.grid_values())
        if self.values is not None:
            return tune.choice(list(self.values))
        if self.kind is int:
            return tune.lograndint(self.lo, self.hi + 1) if self.log else tune.randint(self.lo, self.hi + 1)
        return tune.loguniform(self.lo, self.hi) if self.log else tune.uniform(self.lo, self.hi)

    def describe(self) -> str:
        if self.values is not None:  # explicit values, or the options of a choice field
            return f"{self.name} in {{{', '.join(map(str, self.values))}}}"
        scale = " (log)" if self.log else ""
        return f"{self.name} {self.kind.__name__} in [{self.lo}, {self.hi}]{scale}"


@dataclass(frozen=True)
class SearchSpace:
    """The searched dimensions of one decoder plus the hyperparameters fixed for the sweep."""

    decoder: str
    dims: tuple[Dimension, ...]
    fixed: tuple[tuple[str, Any], ...] = ()  # public name -> value, sorted

    def param_space(self, search: str) -> dict[str, Any]:
        return {d.name: d.domain(search) for d in self.dims}

    def grid_size(self) -> int:
        return math.prod(len(d.grid_values()) for d in self.dims)

    def params_for(self, config: Mapping[str, Any]) -> HyperParams:
        """The decoder's validated hyperparameters for a trial's config (floats tidied to 6 significant
        digits, so a trial's cell id and MLflow params stay readable and reproducible)."""
        from ..decoders import get

        cls = get(self.decoder).Params
        fields = cls.fields_by_name()
        values = dict(self.fixed)
        for d in self.dims:
            v = config[d.name]
            values[d.name] = int(v) if d.kind is int else v if d.kind in (str, bool) else _tidy(float(v))
        return cls(**{fields[k].name: v for k, v in values.items()})

    def searched(self, params: HyperParams) -> dict[str, Any]:
        """The searched hyperparameters' values in `params`, by public name."""
        full = params.to_dict()
        return {d.name: full[d.name] for d in self.dims}


def _tidy(v: float) -> float:
    return float(f"{v:.6g}")


def derive_space(decoder: str, overrides: Mapping[str, Any] | None = None, *, points: int = DEFAULT_POINTS
                 ) -> SearchSpace:
    """The search space of `decoder`: every hyperparameter that declares `search=(lo, hi)`, or, when
    `overrides` is given, exactly the hyperparameters it names (scalars there are fixed, not searched)."""
    from ..decoders import get

    cls = get(decoder).Params
    fields = cls.fields_by_name()
    if overrides is None:
        overrides = {n: None for n, f in fields.items() if f.metadata.get("search") is not None}
        if not overrides:
            raise RippleError(f"decoder {decoder!r} declares no searchable hyperparameters; name them under 'space' "
                              f"(accepted: {', '.join(fields) or 'none'})")
    if not isinstance(overrides, Mapping):
        raise RippleError(f"'space' takes a mapping of {decoder} hyperparameters, got {overrides!r}")
    dims, fixed = [], {}
    for name, raw in overrides.items():
        if name not in fields:
            close = difflib.get_close_matches(str(name), fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise RippleError(f"decoder {decoder!r} has no hyperparameter {name!r}{hint}; accepted: {', '.join(fields)}")
        f = fields[name]
        if (_is_number(raw) and field_kind(f) is not bool) or (isinstance(raw, str) and field_kind(f) is str) \
                or (isinstance(raw, bool) and field_kind(f) is bool):
            fixed[name] = _checked(cls, f, name, raw)
            continue
        dims.append(_dimension(cls, f, name, raw, points))
    if not dims:
        raise RippleError("'space' fixes every hyperparameter it names; give at least one a range or values")
    return SearchSpace(decoder, tuple(dims), tuple(sorted(fixed.items())))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _checked(cls: type[HyperParams], f: dataclasses.Field, name: str, value: Any):
    """`value` as the field's type, validated by the dataclass itself (its one-line RippleError)."""
    kind = field_kind(f)
    if kind is bool:
        if not isinstance(value, bool):
            raise RippleError(f"{cls.decoder_name or cls.__name__} hyperparameter {name} takes true or false, "
                              f"got {value!r}")
        return value
    if kind is str:
        if not isinstance(value, str):
            choices = f.metadata.get("choices")
            takes = f"one of {', '.join(choices)}" if choices else "text"
            raise RippleError(f"{cls.decoder_name or cls.__name__} hyperparameter {name} takes {takes}, got {value!r}")
        return getattr(cls(**{f.name: value}), f.name)
    if kind is int and not (isinstance(value, int) and not isinstance(value, bool)):
        raise RippleError(f"{cls.decoder_name or cls.__name__} hyperparameter {name} takes integers, got {value!r}")
    if not _is_number(value):
        raise RippleError(f"{cls.decoder_name or cls.__name__} hyperparameter {name} takes numbers, got {value!r}")
    return getattr(cls(**{f.name: kind(value)}), f.name)


def _dimension(cls: type[HyperParams], f: dataclasses.Field, name: str, raw: Any, points: int) -> Dimension:
    kind = field_kind(f)
    owner = cls.decoder_name or cls.__name__
    if kind in (str, bool):  # a choice or a flag: its values, all of them by default; free text: the values given
        options = f.metadata.get("choices", ()) if kind is str else (True, False)
        shown = (", ".join(options) or "text (e.g. a filter's name or path)") if kind is str else "true, false"
        values = list(options) if raw is None and options else raw
        if not isinstance(values, list) or not values:
            raise RippleError(f"{owner} hyperparameter {name}: give one value (fixed) or a list of values of "
                              f"{shown}; got {raw!r}")
        checked = tuple(dict.fromkeys(_checked(cls, f, name, v) for v in values))
        return Dimension(name, kind, None, None, checked, False, points)
    if raw is None:
        raw = {}
    if isinstance(raw, list):
        raw = {"values": raw}
    if not isinstance(raw, Mapping):
        raise RippleError(f"{owner} hyperparameter {name}: give a number (fixed), a list of values or a mapping "
                          f"with {', '.join(RANGE_KEYS)}; got {raw!r}")
    unknown = [k for k in raw if k not in RANGE_KEYS]
    if unknown:
        raise RippleError(f"{owner} hyperparameter {name}: unknown key {unknown[0]!r}; accepted: {', '.join(RANGE_KEYS)}")
    log = raw.get("log", False)
    if not isinstance(log, bool):
        raise RippleError(f"{owner} hyperparameter {name}: 'log' takes true or false, got {log!r}")
    n = raw.get("points", points)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise RippleError(f"{owner} hyperparameter {name}: 'points' takes a positive integer, got {n!r}")
    if "values" in raw:
        if "lo" in raw or "hi" in raw:
            raise RippleError(f"{owner} hyperparameter {name}: give either 'values' or 'lo'/'hi', not both")
        values = raw["values"]
        if not isinstance(values, list) or not values:
            raise RippleError(f"{owner} hyperparameter {name}: 'values' takes a non-empty list, got {values!r}")
        checked = tuple(dict.fromkeys(_checked(cls, f, name, v) for v in values))
        return Dimension(name, kind, min(checked), max(checked), checked, log, n)
    default = f.metadata.get("search") or (f.metadata.get("lo"), f.metadata.get("hi"))
    lo, hi = raw.get("lo", default[0]), raw.get("hi", default[1])
    if lo is None or hi is None:
        raise RippleError(f"{owner} hyperparameter {name} has no bounded default search range; give 'lo' and 'hi' "
                          f"or 'values'")
    lo, hi = _checked(cls, f, name, lo), _checked(cls, f, name, hi)
    if not lo < hi:
        raise RippleError(f"{owner} hyperparameter {name}: 'lo' ({lo}) must be below 'hi' ({hi})")
    if log and lo <= 0:
        raise RippleError(f"{owner} hyperparameter {name}: a log-scale range needs lo > 0, got {lo}")
    return Dimension(name, kind, lo, hi, None, log, n)
