"""The shipped demo grid (every decoder on ripple-tiny's two tasks), as `ripple demo` / `make demo`
run it through the same path as any grid, and as the benchmarks (`ripple.bench`) decode it.
The leaderboard that follows the demo's table is the CLI's to compose: dashboards sit above
the platform."""
from __future__ import annotations

from .spec import GRIDS_DIR, parse_spec, read_yaml_spec

DEMO_SPEC = GRIDS_DIR / "demo.yaml"


def demo_spec(model: str = "ripple-tiny", limit: int = 50, cache: str = "none"):
    """demo.yaml with the model, samples per cell and cache policy replaced."""
    _, raw = read_yaml_spec(str(DEMO_SPEC), GRIDS_DIR, "grid")
    # entries restricted to other models (ripple-tiny-bd's editing rows) do not apply to `model`
    decoders = [d for d in raw["decoders"] if not (isinstance(d, dict) and model not in d.get("models", [model]))]
    raw.update(models=[model], limit=limit, caches=[cache], decoders=decoders)
    return parse_spec(raw, str(DEMO_SPEC))
