import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Under pytest-xdist (`make test`: one worker per core) each worker, and what it starts, computes
    on one thread: two workers with a thread per core each would fight over the cores."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"  # read by torch at import, and inherited by subprocesses


def shared_dir() -> Path:
    """../shared beside the repository (CI lays it there); RIPPLE_SHARED overrides."""
    return Path(os.environ.get("RIPPLE_SHARED", REPO.parent / "shared")).resolve()


@pytest.fixture(scope="session")
def shared() -> Path:
    path = shared_dir()
    if not (path / "golden").is_dir():
        raise RuntimeError(f"../shared not found at {path}; set RIPPLE_SHARED")  # a missing fixture is an error, not a skip
    return path


@pytest.fixture(scope="session")
def golden(shared) -> Path:
    return shared / "golden"


@pytest.fixture(scope="session")
def harness_tasks(shared, tmp_path_factory):
    """lm-evaluation-harness's gsm8k, minerva_math500, humaneval and mbpp on ../shared/data, with
    every test doc's plain prompt built (once per session: about 20 s)."""
    from tests.harness_tools import load_tasks, prompts

    tasks = load_tasks(shared / "data", tmp_path_factory.mktemp("harness-tasks"))
    return {name: (task, prompts(task)) for name, task in tasks.items()}


@pytest.fixture(scope="module")
def ray_local():
    """Ray started once for the module on loopback (as `ripple grid` would); each grid or sweep joins it."""
    from tests.platform.gridtools import local_ray

    with local_ray():
        yield


# The longest files of the fresh-clone CI run (2026-12-02, --durations): started first
_LONGEST = ("test_grid_resume.py", "test_grid_faults.py", "test_grid.py", "test_leaderboard.py")


def pytest_collection_modifyitems(config, items):
    """Longest files first, then the other files with slow tests, then the many quick files: under
    `make test`'s two xdist workers (whole files per worker, handed out in this order; the Makefile
    turns off xdist's own reordering by test count) the long files start at once and the quick ones
    fill in at the end, so both workers finish together."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item):
        name = item.path.name
        return (_LONGEST.index(name) if name in _LONGEST else len(_LONGEST), item.path not in slow_files)

    items.sort(key=rank)  # stable: the order within each group stays
