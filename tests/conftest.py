import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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
