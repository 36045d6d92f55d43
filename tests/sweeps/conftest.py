import pytest

from tests.platform.gridtools import RAY_ENV


@pytest.fixture(autouse=True)
def _hermetic_sweep_env(tmp_path, monkeypatch):
    """Sweeps inside a test store into tmp_path, track into SQLite there, and run Ray on loopback.
    RAY_AUTH_MODE is left as the process found it: Ray caches the mode at its first use in a
    process, and an in-process cluster started later must use the same one (as in tests/platform)."""
    monkeypatch.setenv("RIPPLE_STORE", str(tmp_path / "results"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key in ("RAY_USAGE_STATS_ENABLED", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                "TQDM_DISABLE"):
        monkeypatch.setenv(key, RAY_ENV[key])
