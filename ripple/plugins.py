"""Decoders and tasks from other distributions, found through Python entry points (as lm-eval
finds models, vLLM its plugins and pytest `pytest11`): `ripple.decoders` names Scheduler
subclasses, `ripple.tasks` Task subclasses. A registry reads its group once, when it is first
read. Built-ins win: a plugin whose name is taken is refused. A plugin that fails to import, is
not the right kind of class or declares malformed hyperparameters never breaks Ripple: asking for
it is one line naming its distribution and the error, anything else still works, and one warning
line lists what was refused.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable

from .errors import RippleError

DECODER_GROUP = "ripple.decoders"
TASK_GROUP = "ripple.tasks"


@dataclass(frozen=True)
class PluginSource:
    """The distribution a plugin came from; part of its records and cell ids."""

    distribution: str
    version: str

    def __str__(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class BrokenPlugin:
    name: str
    kind: str  # "decoder" or "task"
    source: PluginSource
    error: str

    def message(self) -> str:
        return (f"{self.kind} {self.name!r} from plugin {self.source.distribution} {self.source.version} "
                f"cannot be used: {self.error}")


@dataclass(frozen=True)
class Discovered:
    loaded: dict[str, tuple[Any, PluginSource]]  # name -> (class, source)
    broken: dict[str, BrokenPlugin]


def source_of(ep: EntryPoint) -> PluginSource:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return PluginSource("(unknown distribution)", "?")
    return PluginSource(dist.metadata["Name"] or dist.name, dist.version)


def discover(group: str, kind: str, builtins: set[str], check: Callable[[str, Any], None]) -> Discovered:
    """Load every entry point of `group`; `check(name, obj)` raises (any exception, one line) when
    `obj` is not a usable plugin of this kind. Broken ones are kept with their reason."""
    loaded: dict[str, tuple[Any, PluginSource]] = {}
    broken: dict[str, BrokenPlugin] = {}
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        source = source_of(ep)
        if ep.name in builtins:
            broken[ep.name] = BrokenPlugin(ep.name, kind, source, f"the name is Ripple's built-in {kind}; built-ins win")
            continue
        if ep.name in loaded or ep.name in broken:
            other = loaded[ep.name][1] if ep.name in loaded else broken[ep.name].source
            loaded.pop(ep.name, None)
            broken[ep.name] = BrokenPlugin(ep.name, kind, source, f"{other.distribution} registers the same name")
            continue
        try:
            obj = ep.load()
            check(ep.name, obj)
        except Exception as exc:  # noqa: BLE001 -- a plugin's failure of any kind is reported, never raised
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            broken[ep.name] = BrokenPlugin(ep.name, kind, source, f"{type(exc).__name__}: {text}".rstrip(": "))
            continue
        loaded[ep.name] = (obj, source)
    if broken:
        logging.getLogger("ripple.plugins").warning(
            "%s plugin(s) refused (asking for one says why): %s", kind,
            ", ".join(f"{b.name} ({b.source.distribution})" for b in broken.values()))
    return Discovered(loaded, broken)


def refuse(broken: BrokenPlugin) -> RippleError:
    return RippleError(broken.message())
