"""Modules imported on first use, so that what only describes (decoder names, hyperparameters and
their ranges, `ripple --help`) costs no torch import (about 2 s of CPU): `from ..lazy import torch`
in a decoder module reads like `import torch`, and the first attribute read imports it."""
from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class LazyModule(types.ModuleType):
    """A stand-in for module `name` that imports it at its first attribute read. Every read goes to the
    module itself (so a test that patches `torch.rand` is seen), and the stand-in never enters
    sys.modules: `"torch" in sys.modules` keeps saying whether torch was imported."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):  # introspection (copy, pickle, doctest) stays cheap
            raise AttributeError(attr)
        module = sys.modules.get(self.__name__) or importlib.import_module(self.__name__)
        return getattr(module, attr)


torch = LazyModule("torch")
