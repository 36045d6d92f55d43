import pytest

from tests.platform.gridtools import run_grid


@pytest.fixture(scope="session")
def grid_store(tmp_path_factory):
    """One real store for the browser tests: the demo grid and the rps-tiny grid (Confidence at four
    taus, RPS variants) at one sample per cell, with their `ripple grid --json` summaries. Built once:
    the grids take most of these tests' time."""
    store = tmp_path_factory.mktemp("grids") / "store"
    return store, {name: run_grid(name, "--limit", "1", "--store", str(store)) for name in ("demo", "rps-tiny")}
