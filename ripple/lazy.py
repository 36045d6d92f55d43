"""Modules imported on first use, so that what only describes (decoder names, hyperparameters and
their ranges, `ripple --help`) costs no torch import (about 2 s of CPU): `from ..lazy import torch`
in a decoder module reads like `import torch`, and the first attribute read imports it."""
from __future__ import annotations

import importlib
import types
from typing import Any


class LazyModule(types.ModuleType):
    """A stand-in for module `name` that imports it at its first attribute read, then keeps a copy of
    its namespace (later reads are plain attribute reads). It never enters sys.modules, so
    `"torch" in sys.modules` keeps saying whether torch was imported."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):  # introspection (copy, pickle, doctest) stays cheap
            raise AttributeError(attr)
        module = importlib.import_module(self.__name__)
        self.__dict__.update(vars(module))
        return getattr(module, attr)


torch = LazyModule("torch")
