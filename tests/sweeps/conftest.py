import pytest

from tests.platform.gridtools import RAY_ENV


@pytest.fixture(autouse=True)
def _hermetic_sweep_env(tmp_path, monkeypatch):
    """Sweeps inside a test store into tmp_path, track into SQLite there, and run Ray on loopback.
    Ray's auth mode and what a local address means are the process's, set once (tests/conftest.py)."""
    monkeypatch.setenv("RIPPLE_STORE", str(tmp_path / "results"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key in ("RAY_USAGE_STATS_ENABLED", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TQDM_DISABLE"):
        monkeypatch.setenv(key, RAY_ENV[key])
