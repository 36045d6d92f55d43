"""`ripple ui` seen in a real browser: headless Chromium renders the demo experiment's runs table."""
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ripple.platform.experiments.tracking import ui_url
from tests.dashboards.cdp import CHROMIUM, FLAGS

pytestmark = pytest.mark.usefixtures("chromium")  # a missing browser fails the test, saying how to install it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


@pytest.mark.slow
def test_the_ui_opens_on_the_runs_table_with_every_demo_run(tmp_path, grid_store):
    store, grids = grid_store  # the demo grid (beside an rps-tiny grid)
    cells = len(grids["demo"]["results"])  # a run per cell
    port = _free_port()
    ui = subprocess.Popen([sys.executable, "-m", "ripple.cli", "ui", "--store", str(store), "--port", str(port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while True:
            try:
                _get(base + "/health")
                break
            except OSError:
                assert ui.poll() is None, ui.stderr.read().decode()[-2000:]
                assert time.time() < deadline, "mlflow server did not come up in 90 s"
                time.sleep(0.5)
        exp = json.loads(_get(f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=demo"))["experiment"]
        dom = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1600,3000",
             "--virtual-time-budget=20000",
             "--dump-dom", ui_url(port, exp["experiment_id"])],
            capture_output=True, text=True, timeout=180).stdout
    finally:
        os.killpg(ui.pid, 15)
        ui.wait(timeout=30)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style).*?</\1>", "", dom, flags=re.S)))
    names = set(re.findall(r"ripple-tiny(?:-bd)? (?:arith|pyfunc|freefunc) [a-z_]+(?:\([^)]*\))? g48b16 none", text))
    assert len(names) == cells == 60, text[:2000]  # every demo cell's run, by name, in the rendered table
    assert "60 matching runs" in text
    assert "Traces 0" not in text  # not the GenAI overview MLflow 3 opens by default
