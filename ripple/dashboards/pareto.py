"""Pareto fronts over decoder settings: which settings no other setting beats on every axis.

Reports and sweeps both name the front (accuracy vs TPS, accuracy vs mean NFE), so it
lives here as a pure function with no plotting or polars in it.

Rules: point a dominates point b when a is at least as good on every objective and
strictly better on one. Identical points do not dominate each other, so ties stay on
the front together. Points with a missing or NaN coordinate are never on the front.
"""
from __future__ import annotations

import math
from typing import Literal, Sequence

Sense = Literal["max", "min"]
ACCURACY_TPS: tuple[Sense, Sense] = ("max", "max")  # accuracy up, tokens per second up
ACCURACY_NFE: tuple[Sense, Sense] = ("max", "min")  # accuracy up, forward passes down
ACCURACY_TPF: tuple[Sense, Sense] = ("max", "max")  # accuracy up, tokens per forward up


def _usable(point: Sequence[float | None]) -> bool:
    return all(v is not None and not math.isnan(float(v)) for v in point)


def dominates(a: Sequence[float], b: Sequence[float], senses: Sequence[Sense]) -> bool:
    """True when `a` is no worse than `b` on every objective and better on at least one."""
    better = False
    for x, y, sense in zip(a, b, senses):
        gain = (x - y) if sense == "max" else (y - x)
        if gain < 0:
            return False
        better = better or gain > 0
    return better


def pareto_front(points: Sequence[Sequence[float | None]], senses: Sequence[Sense]) -> list[int]:
    """Indices (ascending) of the non-dominated points.

    points: one coordinate tuple per candidate, e.g. (accuracy, tps).
    senses: "max" or "min" per coordinate, e.g. ACCURACY_TPS.
    """
    if any(s not in ("max", "min") for s in senses):
        raise ValueError(f"senses must be 'max' or 'min', got {list(senses)}")
    for p in points:
        if len(p) != len(senses):
            raise ValueError(f"every point needs {len(senses)} coordinates, got {tuple(p)}")
    usable = [i for i, p in enumerate(points) if _usable(p)]
    vals = {i: tuple(float(v) for v in points[i]) for i in usable}  # type: ignore[arg-type]
    return [i for i in usable if not any(dominates(vals[j], vals[i], senses) for j in usable if j != i)]


def front_flags(points: Sequence[Sequence[float | None]], senses: Sequence[Sense]) -> list[bool]:
    """`pareto_front` as one flag per point, for a table column."""
    front = set(pareto_front(points, senses))
    return [i in front for i in range(len(points))]
