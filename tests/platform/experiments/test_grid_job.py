"""`ray job submit` of an unchanged `ripple grid` command to a real Ray head on loopback.

The head runs with token auth, and `ray job submit` with the same RAY_AUTH_MODE and token,
as ray_cluster.yaml sets them up on a real cluster. The head is stopped at the end by
signalling its own process group, so no other Ray instance on the machine is touched.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ripple.platform.experiments.store import ResultStore

from tests.platform.gridtools import env, group_alive, listening, ray_bin, seed_mlflow, start_head, stop_head

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]


def test_ray_job_submit_runs_the_grid_on_a_loopback_head(tmp_path, mlflow_db):
    # `ripple` and `python` inside the job are whatever is on the head's PATH: put the venv first
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    head_env = env(PATH=path)
    head, _, ray_tmp = start_head("--include-dashboard=true", "--dashboard-host=127.0.0.1", PATH=path)
    dash = next(int(a.split("=")[1]) for a in head.args if a.startswith("--dashboard-port="))
    store_dir = tmp_path / "store"
    seed_mlflow(store_dir, mlflow_db)
    try:
        deadline = time.time() + 120
        # the dashboard's port answers first (a socket, cheap to poll); each `ray job list` is an interpreter
        # importing Ray (about a second of CPU), so it is asked only then
        while not listening(dash) or subprocess.run(ray_bin("job", "list", "--address", f"http://127.0.0.1:{dash}"),
                                                    env=head_env, capture_output=True).returncode != 0:
            assert head.poll() is None and time.time() < deadline, "the Ray head did not come up"
            time.sleep(1)
        # the job API answers before the head's job agent registers (slowly on a loaded machine); Ray
        # then refuses the submission with "No available agent ... try again later", so do as it says
        while True:
            job = subprocess.run(
                ray_bin("job", "submit", "--address", f"http://127.0.0.1:{dash}", "--working-dir", ".", "--",
                        "ripple", "grid", "rps-tiny", "--limit", "1", "--workers", "1", "--store", str(store_dir),
                        "--json"),
                cwd=REPO, env=head_env, capture_output=True, text=True, timeout=600)
            if "No available agent to submit job" not in job.stderr or time.time() > deadline:
                break
            time.sleep(2)
        assert job.returncode == 0, (job.stdout + job.stderr)[-4000:]
        assert "succeeded" in job.stdout, job.stdout[-3000:]
        summary = json.loads(next(ln for ln in job.stdout.splitlines() if ln.startswith('{"spec"')))
        assert (summary["planned"], summary["computed"]) == (27, 27)
    finally:
        stop_head(head)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not group_alive(head.pid)  # the head and everything it started is gone
    records = ResultStore(store_dir, "rps-tiny").read()
    assert records.height == 27 and records["error"].null_count() == 27
    assert records["cell_id"].n_unique() == 27 and (records["nfe"] > 0).all()
    assert (store_dir / "mlflow.db").exists()
