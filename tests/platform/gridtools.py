"""Helpers for the grid tests: a Ray-safe environment, `ripple grid` subprocesses, store polling.

Every Ray process a test starts runs on loopback with token auth set the same way on
every side (driver, `ray start`, `ray job submit`), from an in-memory token, so nothing is
written to ~/.ray and `ray job submit` never meets the "Missing authentication token" trap.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, TypeVar

from ripple.errors import RippleError
from ripple.platform.experiments.store import ResultStore

T = TypeVar("T")

RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # loopback only
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN": secrets.token_hex(16),
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
    "TQDM_DISABLE": "1",
}


@contextmanager
def local_ray():
    """Ray started in this process on loopback (as `ripple grid` would), for a module's grids to join;
    shut down on exit."""
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        for key, value in RAY_ENV.items():
            if not key.startswith("RAY_AUTH"):  # the auth mode stays as this process first used it
                mp.setenv(key, value)
        mp.delenv("RAY_ADDRESS", raising=False)
        import ray

        from ripple.platform.experiments.grid import connect_ray

        connect_ray()
        try:
            yield
        finally:
            ray.shutdown()


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "RIPPLE_STORE")}
    return {**out, **RAY_ENV, **extra}


def grid_cmd(*args: str, command: str = "grid") -> list[str]:
    return [sys.executable, "-m", "ripple.cli", command, *args]


def run_grid(*args: str, timeout: float = 300) -> dict:
    """`ripple grid ... --json` to completion; its JSON summary."""
    proc = subprocess.run(grid_cmd(*args, "--json"), capture_output=True, text=True, env=env(), timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # the summary is the last line (Ray may print before it)


def start_grid(*args: str, command: str = "grid", stdout=subprocess.DEVNULL) -> subprocess.Popen:
    """A driver (`ripple grid`, or `command`) in its own process group, so a test can SIGKILL it and
    everything it started. SIGINT is reset to its default for it: a suite started in the background of
    a non-interactive shell (`make test &`) inherits SIGINT ignored, and Python keeps an ignored SIGINT
    ignored."""
    return subprocess.Popen(grid_cmd(*args, command=command), stdout=stdout, stderr=subprocess.PIPE, text=True,
                            env=env(), start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the driver, then whatever it started that outlived it (Ray's per-node agents do)."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver led its own group (start_new_session)
    except ProcessLookupError:
        pass


def signal_when(proc: subprocess.Popen, ready: Callable[[], T], signum: int, timeout: float) -> tuple[T, str, str]:
    """Once `ready()` returns (it polls, and fails if the driver exits first), send the driver `signum`;
    then `ready()`'s value and the driver's stdout and stderr, once it exits within `timeout` s (it and
    its group are SIGKILLed when it does not, and the test fails)."""
    try:
        value = ready()
        os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    return value, out, err


def wait_group_gone(proc: subprocess.Popen, timeout: float = 30) -> None:
    """Wait until nothing is left in the stopped driver's process group (it shut its Ray down)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise AssertionError("processes of the stopped driver's Ray are still running")


def stored(store: ResultStore):
    """Rows in the store right now; tolerates a part file being renamed or compacted under us."""
    for _ in range(20):
        try:
            return store.read_all()
        except (RippleError, FileNotFoundError):
            time.sleep(0.1)
    return store.read_all()


def wait_for_records(store: ResultStore, count: int, proc: subprocess.Popen, timeout: float = 240):
    """Poll until the store holds at least `count` rows; fail if the driver exits first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        rows = stored(store)
        if rows.height >= count:
            return rows
        if proc.poll() is not None:
            raise AssertionError(f"driver exited ({proc.returncode}) before {count} records: {proc.stderr.read()[-2000:]}")
        time.sleep(0.1)
    raise AssertionError(f"no {count} records within {timeout}s")


def write_spec(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
