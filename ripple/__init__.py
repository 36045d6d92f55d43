"""Ripple: parallel decoders for diffusion language models.

`import ripple` is cheap (no torch, no Ray: they load on first use). The Python API
(ripple/api.py): `ripple.load`, `ripple.generate`, `ripple.evaluate`, `ripple.grid`,
`ripple.sweep`, `ripple.leaderboard`, `ripple.learn_label`, `ripple.learn_train`; bad input raises `ripple.RippleError`. A decoder of your
own subclasses `ripple.Scheduler` (see docs/python.md).
"""
from __future__ import annotations

import importlib
from typing import Any

from .errors import RippleError  # noqa: F401

# public name -> the module that defines it, imported on first use (PEP 562)
_LAZY = {**dict.fromkeys(("load", "generate", "evaluate", "grid", "sweep", "leaderboard", "grid_spec", "sweep_spec",
                          "learn_label", "learn_train", "Generation", "Evaluation"), "ripple.api"),
         **dict.fromkeys(("Scheduler", "BlockState", "Plan", "Commit", "Lookahead", "Resolution", "RunShape"),
                         "ripple.decoders"),
         "HyperParams": "ripple.decoders.params", "hp": "ripple.decoders.params", "choice": "ripple.decoders.params",
         "flag": "ripple.decoders.params"}

__all__ = ["RippleError", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ripple' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
