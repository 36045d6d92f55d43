"""Reading a figure's accuracy interval bars back: what `ripple.dashboards.plots.interval_bars` drew, by its gid."""
from __future__ import annotations

from ripple.dashboards.plots import INTERVAL_GID, INTERVAL_LABEL
from ripple.platform.experiments.metrics import wilson


def _round(*values: float) -> tuple[float, ...]:
    return tuple(round(float(v), 6) for v in values)  # drawn bounds are y - (y - lo): equal to 1e-12


def bars(ax) -> list[tuple[float, ...]]:
    """(x, lo, hi) of every interval bar on `ax`, sorted (rounded to 6 decimals, as `wilson_bars`)."""
    out = []
    for coll in ax.collections:
        if coll.get_gid() == INTERVAL_GID:
            for (x0, y0), (x1, y1) in coll.get_segments():
                assert x0 == x1  # vertical
                out.append(_round(x0, min(y0, y1), max(y0, y1)))
    return sorted(out)


def wilson_bars(points) -> list[tuple[float, ...]]:
    """(x, Wilson lo, Wilson hi) of (x, correct, n) points, from the metrics module, sorted."""
    return sorted(_round(x, *wilson(correct, n)) for x, correct, n in points)


def has_interval_legend(fig) -> bool:
    """The figure (or one of its axes) has a legend entry for the bars."""
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    return any(t.get_text() == INTERVAL_LABEL for lg in legends if lg is not None for t in lg.get_texts())
