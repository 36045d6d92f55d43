"""Helpers for the grid tests: a Ray-safe environment, `ripple grid` subprocesses, store polling.

Every Ray process a test starts runs on loopback with token auth set the same way on
every side (driver, `ray start`, `ray job submit`), from an in-memory token, so nothing is
written to ~/.ray and `ray job submit` never meets the "Missing authentication token" trap.

A `ripple grid` subprocess joins one Ray head per test process (`shared_head`, through RAY_ADDRESS,
as a driver on a cluster does) unless its test is about the Ray a driver starts and stops itself
(`own_ray=True`): starting and stopping a local Ray costs a driver about 4 s, which most grid tests,
about resume, faults and records rather than Ray's start-up, need not pay again and again. In-process
grids and sweeps join the same head from the test process (`joined_ray`), which uses the head's settings
from its start (tests/conftest.py: Ray fixes its auth mode and what a local address means once per process).
"""
from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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
def joined_ray():
    """This process connected to its shared head as a driver (as `ripple grid` on a cluster is), for a
    module's in-process grids and sweeps, which find the connection and use it; disconnected on exit.
    A Ray started here instead would cost its daemons' start-up (about 5 s of CPU) again per module."""
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        for key, value in RAY_ENV.items():
            mp.setenv(key, value)
        mp.setenv("RAY_ADDRESS", shared_head())
        import ray

        from ripple.platform.experiments.grid import connect_ray

        connect_ray()
        try:
            yield
        finally:
            ray.shutdown()


def env(own_ray: bool = True, **extra: str) -> dict[str, str]:
    """The environment of a Ray-side process: RAY_ENV, no inherited store, tracking URI or cluster, and
    the shared head's address unless `own_ray`."""
    out = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "RIPPLE_STORE")}
    joined = {} if own_ray else {"RAY_ADDRESS": shared_head()}
    return {**out, **RAY_ENV, **joined, **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def ray_bin(*args: str) -> list[str]:
    """The `ray` command of this environment."""
    return [str(Path(sys.executable).parent / "ray"), *args]


def start_head(*options: str, **extra_env: str) -> tuple[subprocess.Popen, int, str]:
    """`ray start --head --block` on loopback in its own process group, every port of its own (two test
    processes, or another Ray on this host, hold the fixed defaults); (process, GCS port, temp dir).
    Its temp dir is short: Ray's socket paths must fit 107 bytes."""
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    port = free_port()
    head = subprocess.Popen(
        ray_bin("start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
                f"--num-cpus={os.cpu_count()}", f"--temp-dir={ray_tmp}", f"--ray-client-server-port={free_port()}",
                f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
                f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
                f"--dashboard-port={free_port()}", *options),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(**extra_env), start_new_session=True,
        preexec_fn=_end_with_parent)
    return head, port, ray_tmp


def _end_with_parent() -> None:
    """In the head's process: SIGTERM when the test process that started it dies (killed, it runs no
    atexit), which stops the head and what it started."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def group_alive(pgid: int) -> bool:
    """A live (not zombie) process is left in the group."""
    out = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True).stdout.split()
    return any(not state.startswith("Z") for state in out)


def stop_head(head: subprocess.Popen, grace: float = 3) -> None:
    """Stop a head: SIGTERM to its whole process group, then SIGKILL whatever is left after `grace` s."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(head.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + wait
        while time.time() < deadline and (head.poll() is None or group_alive(head.pid)):  # poll() reaps it
            time.sleep(0.2)
        if not group_alive(head.pid):
            break
    head.wait(timeout=30)


_SHARED: dict[str, str] = {}


def shared_head() -> str:
    """The address of this test process's Ray head, started at its first use and killed at exit (a
    head's SIGTERM drains for 30 s; nothing of this one needs keeping)."""
    if "address" not in _SHARED:
        head, port, ray_tmp = start_head("--include-dashboard=false", "--include-log-monitor=false")

        def stop() -> None:
            stop_head(head, grace=0)
            shutil.rmtree(ray_tmp, ignore_errors=True)

        atexit.register(stop)
        address = f"127.0.0.1:{port}"
        deadline = time.time() + 120
        # the GCS port answers first (a socket, cheap to poll); each `ray health-check` is an interpreter
        # importing Ray (about a second of CPU), so it is asked only then
        while not listening(port) or subprocess.run(ray_bin("health-check", "--address", address), env=env(),
                                                     capture_output=True).returncode != 0:
            assert head.poll() is None and time.time() < deadline, "the shared Ray head did not come up"
            time.sleep(0.3)
        _SHARED["address"] = address
    return _SHARED["address"]


def grid_cmd(*args: str, command: str = "grid") -> list[str]:
    return [sys.executable, "-m", "ripple.cli", command, *args]


def run_grid(*args: str, timeout: float = 300, own_ray: bool = False) -> dict:
    """`ripple grid ... --json` to completion (on the shared head unless `own_ray`); its JSON summary."""
    proc = subprocess.run(grid_cmd(*args, "--json"), capture_output=True, text=True, env=env(own_ray),
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # the summary is the last line (Ray may print before it)


def start_grid(*args: str, command: str = "grid", stdout=subprocess.DEVNULL, own_ray: bool = False) -> subprocess.Popen:
    """A driver (`ripple grid`, or `command`) in its own process group, so a test can SIGKILL it and
    everything it started (on the shared head unless `own_ray`: Ray ends a dead driver's workers).
    SIGINT is reset to its default for it: a suite started in the background of a non-interactive shell
    (`make test &`) inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored."""
    return subprocess.Popen(grid_cmd(*args, command=command), stdout=stdout, stderr=subprocess.PIPE, text=True,
                            env=env(own_ray), start_new_session=True,
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
    """Poll until the store holds at least `count` rows; fail if the driver exits first. The store is
    read only when its files change: a read at every poll cost the test process most of a core, which
    the grid it waits for needs on two."""
    deadline, seen = time.time() + timeout, None
    while time.time() < deadline:
        files = store.files()
        if files != seen:
            seen = files
            rows = stored(store)
            if rows.height >= count:
                return rows
        if proc.poll() is not None:
            raise AssertionError(f"driver exited ({proc.returncode}) before {count} records: {proc.stderr.read()[-2000:]}")
        time.sleep(0.1)
    raise AssertionError(f"no {count} records within {timeout}s")


def seed_mlflow(store_dir: Path, template: Path) -> None:
    """Put an empty MLflow store (the session's `mlflow_db`, migrated once) where a grid tracking into
    `store_dir` will look: for tests not about creating one (a new store's migrations cost about 2 s of CPU)."""
    store_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(template, store_dir / "mlflow.db")


def write_spec(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
