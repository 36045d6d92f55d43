"""`ripple demo` / `make demo`: the shipped demo grid (every decoder on ripple-tiny's two tasks)
through the same path as any grid, Ray workers and result store included; one table, then the
leaderboard of the store (every experiment in it) and its path."""
from __future__ import annotations

import os
from pathlib import Path

from .grid import default_store, format_table, run_grid
from .spec import GRIDS_DIR, parse_spec, read_yaml_spec

DEMO_SPEC = GRIDS_DIR / "demo.yaml"


def demo_spec(model: str = "ripple-tiny", limit: int = 50, cache: str = "none"):
    """demo.yaml with the model, samples per cell and cache policy replaced."""
    _, raw = read_yaml_spec(str(DEMO_SPEC), GRIDS_DIR, "grid")
    # entries restricted to other models (ripple-tiny-bd's editing rows) do not apply to `model`
    decoders = [d for d in raw["decoders"] if not (isinstance(d, dict) and model not in d.get("models", [model]))]
    raw.update(models=[model], limit=limit, caches=[cache], decoders=decoders)
    return parse_spec(raw, str(DEMO_SPEC))


def run_demo(model: str = "ripple-tiny", limit: int = 50, cache: str = "none",
             store: str | os.PathLike | None = None) -> int:
    from ...dashboards.leaderboard import build_leaderboard, summary_line

    root = Path(store) if store else default_store()
    run = run_grid(demo_spec(model, limit, cache), root, fresh=True)
    print(format_table(run))
    print(summary_line(build_leaderboard(root)))
    return 0
