"""What every Ripple figure shares: a figure without pyplot, PNG writing, and accuracy drawn with its interval.

Why one helper for the interval bars: tables print each accuracy's 95 % Wilson interval, and a plot that
drew bare points would show two decoders inside each other's intervals as separated. Every accuracy plot
(the report's Pareto and sensitivity plots, the leaderboard's, floors.png, a sweep's pareto.png) draws its
bars here, from the metrics module's bounds (`accuracy_lo`, `accuracy_hi`), so no plot is missed and a test
finds them by `INTERVAL_GID`.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

INTERVAL_GID = "accuracy-interval"  # the bars' collection in a figure (and an SVG's group id)
INTERVAL_LABEL = "95 % Wilson interval"  # the bars' legend entry
INTERVAL_CAPTION = ("Each point's vertical bar is its accuracy's 95 % Wilson interval: points whose bars overlap "
                    "are not told apart by this many samples.")


def new_figure(width: float = 6.4, height: float = 4.0):
    from matplotlib.figure import Figure  # object API: no pyplot global state, no GUI backend

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def save_png(fig, path: Path) -> Path:
    fig.savefig(path, format="png", metadata={"Software": None})  # no version stamp: same data, same bytes
    return path


def _value(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def interval_bars(ax, xs: Sequence[Any], accuracy: Sequence[Any], lo: Sequence[Any], hi: Sequence[Any],
                  color: Any = "0.35") -> int:
    """Draw a vertical bar from `lo` to `hi` at each point (x, accuracy) that has both; returns how many.
    The first bars of an axes carry the legend entry INTERVAL_LABEL."""
    pts = [(x, a, lo_, hi_) for x, a, lo_, hi_ in zip(xs, accuracy, lo, hi)
           if _value(x) is not None and _value(a) is not None]
    if not pts:
        return 0
    first = not any(c.get_gid() == INTERVAL_GID for c in ax.collections)
    bars = ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                       yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]], fmt="none", ecolor=color,
                       elinewidth=0.9, capsize=2.5, alpha=0.75, zorder=1.5,
                       label=INTERVAL_LABEL if first else "_nolegend_")
    bars.lines[2][0].set_gid(INTERVAL_GID)
    return len(pts)
