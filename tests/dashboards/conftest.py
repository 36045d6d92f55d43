import pytest

from tests.dashboards.cdp import CHROMIUM


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless browser the UI tests drive. A missing browser is an error, not a skip: `.ci/run`
    installs Debian's `chromium`; elsewhere `apt-get install chromium`."""
    if CHROMIUM is None:
        raise RuntimeError("no chromium on PATH; install Debian's package (apt-get install chromium), as .ci/run does")
    return CHROMIUM
