import json
import os

import pytest
from filelock import FileLock

from tests.dashboards.cdp import CHROMIUM
from tests.platform.gridtools import run_grid


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless browser the UI tests drive. A missing browser is an error, not a skip: `.ci/run`
    installs Debian's `chromium`; elsewhere `apt-get install chromium`."""
    if CHROMIUM is None:
        raise RuntimeError("no chromium on PATH; install Debian's package (apt-get install chromium), as .ci/run does")
    return CHROMIUM


@pytest.fixture(scope="session")
def grid_store(tmp_path_factory):
    """One real store for the browser tests: the demo grid and the rps-tiny grid (Confidence at four
    taus, RPS variants) at one sample per cell, with their `ripple grid --json` summaries. Built once:
    the grids take most of these tests' time."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the xdist workers: the first to ask builds it, the other waits
    store, summaries = root / "grid-store" / "store", root / "grid-store" / "summaries.json"
    (root / "grid-store").mkdir(exist_ok=True)
    with FileLock(str(root / "grid-store.lock")):
        if not summaries.exists():
            grids = {name: run_grid(name, "--limit", "1", "--store", str(store)) for name in ("demo", "rps-tiny")}
            summaries.write_text(json.dumps(grids))
    return store, json.loads(summaries.read_text())
