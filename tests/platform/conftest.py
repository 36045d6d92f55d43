import pytest

from tests.platform.gridtools import RAY_ENV


@pytest.fixture(autouse=True)
def _hermetic_grid_env(tmp_path, monkeypatch):
    """Grids run inside a test (e.g. `ripple demo`) store into a temporary directory, track into a
    SQLite file there, and start Ray on loopback. RAY_AUTH_MODE is left alone here: Ray fixes the
    mode at its first use in a process, so the process sets it once, as its shared head and subprocess
    drivers use it (tests/conftest.py, gridtools.RAY_ENV)."""
    monkeypatch.setenv("RIPPLE_STORE", str(tmp_path / "results"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key in ("RAY_USAGE_STATS_ENABLED", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        monkeypatch.setenv(key, RAY_ENV[key])
