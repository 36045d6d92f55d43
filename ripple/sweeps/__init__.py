"""Sweeps: Ray Tune searches over a decoder's hyperparameters (DESIGN.md section 7).

`spaces` derives search spaces from the decoders' hyperparameter dataclasses, `spec`
reads a sweep spec (YAML), `run` drives Tune with trials that stream their samples to
the grid platform's long-lived model workers. Shipped specs live in `specs/`.
"""
from .spaces import Dimension, SearchSpace, derive_space  # noqa: F401
from .spec import SweepSpec, load_sweep_spec, parse_sweep_spec, shipped_sweep_specs  # noqa: F401
