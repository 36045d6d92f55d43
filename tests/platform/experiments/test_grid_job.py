"""`ray job submit` of an unchanged `ripple grid` command to a real Ray head on loopback.

The head runs with token auth, and `ray job submit` with the same RAY_AUTH_MODE and token,
as ray_cluster.yaml sets them up on a real cluster. The head is stopped at the end by
signalling its own process group, so no other Ray instance on the machine is touched.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ripple.platform.experiments.store import ResultStore

from tests.platform.gridtools import env

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "ray"), *args]


def _stop(head: subprocess.Popen) -> None:
    """Stop the head: SIGTERM to its whole process group, then SIGKILL whatever is left after 3 s."""
    for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
        try:
            os.killpg(head.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + grace
        while time.time() < deadline and (head.poll() is None or _group_alive(head.pid)):  # poll() reaps it
            time.sleep(0.2)
        if not _group_alive(head.pid):
            break
    head.wait(timeout=30)


def _group_alive(pgid: int) -> bool:
    """A live (not zombie) process is left in the group."""
    out = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True).stdout.split()
    return any(not state.startswith("Z") for state in out)


def test_ray_job_submit_runs_the_grid_on_a_loopback_head(tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    gcs, dash = _free_port(), _free_port()
    # `ripple` and `python` inside the job are whatever is on the head's PATH: put the venv first
    head_env = env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    head = subprocess.Popen(
        _ray("start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}", "--num-cpus=2",
             "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
             # the job agent's fixed default port (52365) may be held by another Ray on this host (a grid
             # in another shell); then the head has no job agent and refuses every submission
             f"--dashboard-agent-listen-port={_free_port()}",
             f"--temp-dir={ray_tmp}"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=head_env, start_new_session=True)
    store_dir = tmp_path / "store"
    try:
        deadline = time.time() + 120
        while subprocess.run(_ray("job", "list", "--address", f"http://127.0.0.1:{dash}"), env=head_env,
                             capture_output=True).returncode != 0:
            assert head.poll() is None and time.time() < deadline, "the Ray head did not come up"
            time.sleep(1)
        # the job API answers before the head's job agent registers (slowly on a loaded machine); Ray
        # then refuses the submission with "No available agent ... try again later", so do as it says
        while True:
            job = subprocess.run(
                _ray("job", "submit", "--address", f"http://127.0.0.1:{dash}", "--working-dir", ".", "--",
                     "ripple", "grid", "rps-tiny", "--limit", "1", "--store", str(store_dir), "--json"),
                cwd=REPO, env=head_env, capture_output=True, text=True, timeout=600)
            if "No available agent to submit job" not in job.stderr or time.time() > deadline:
                break
            time.sleep(2)
        assert job.returncode == 0, (job.stdout + job.stderr)[-4000:]
        assert "succeeded" in job.stdout, job.stdout[-3000:]
        summary = json.loads(next(ln for ln in job.stdout.splitlines() if ln.startswith('{"spec"')))
        assert (summary["planned"], summary["computed"]) == (27, 27)
    finally:
        _stop(head)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not _group_alive(head.pid)  # the head and everything it started is gone
    records = ResultStore(store_dir, "rps-tiny").read()
    assert records.height == 27 and records["error"].null_count() == 27
    assert records["cell_id"].n_unique() == 27 and (records["nfe"] > 0).all()
    assert (store_dir / "mlflow.db").exists()
