import pytest

from tests.platform.gridtools import RAY_ENV


@pytest.fixture(autouse=True)
def _hermetic_grid_env(tmp_path, monkeypatch):
    """Grids run inside a test (e.g. `ripple demo`) store into a temporary directory, track into a
    SQLite file there, and start Ray on loopback. Ray's auth mode and what a local address means are
    the process's, set once at its start (tests/conftest.py): Ray reads them once per process."""
    monkeypatch.setenv("RIPPLE_STORE", str(tmp_path / "results"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", RAY_ENV["RAY_USAGE_STATS_ENABLED"])
