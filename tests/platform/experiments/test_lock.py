"""The driver lock in-process: exclusive, names its holder, refreshes its heartbeat in place, and is
taken over when stale (a dead process on this host, or a heartbeat too old from another host)."""
import json
import os
import subprocess
import sys
import time

import pytest

from ripple.errors import RippleError
from ripple.platform.experiments import lock as lockmod
from ripple.platform.experiments.lock import DriverLock, _encode, _read


def test_a_second_driver_is_refused_naming_the_holder(tmp_path):
    with DriverLock(tmp_path, "experiment 'x'") as held:
        holder = _read(held.path)
        assert (holder.host, holder.pid) == (os.uname().nodename, os.getpid())
        with pytest.raises(RippleError) as exc:
            DriverLock(tmp_path, "experiment 'x'").acquire()
        assert str(exc.value).count("\n") == 0
        assert f"already being run by another driver (host {holder.host}, pid {os.getpid()}, started " in str(exc.value)
    assert not held.path.exists()  # released


def test_the_heartbeat_is_rewritten_in_place(tmp_path, monkeypatch):
    monkeypatch.setattr(lockmod, "HEARTBEAT_SECONDS", 0.05)
    with DriverLock(tmp_path, "x") as held:
        first = _read(held.path).heartbeat
        size = held.path.stat().st_size
        time.sleep(0.3)
        now = _read(held.path)
        assert now.heartbeat > first and held.path.stat().st_size == size
        assert json.loads(held.path.read_text())["token"] == held.token


def _write(path, host, pid, heartbeat):
    path.write_bytes(_encode(host, pid, heartbeat - 100, "old", heartbeat))


def test_a_lock_of_a_dead_process_on_this_host_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _write(tmp_path / "driver.lock", os.uname().nodename, int(dead.stdout), time.time())
    with DriverLock(tmp_path, "x") as held:
        assert _read(held.path).pid == os.getpid()
    assert not list(tmp_path.glob("driver.lock*"))  # nothing left beside it


def test_another_hosts_lock_is_stale_only_when_its_heartbeat_is_old(tmp_path):
    _write(tmp_path / "driver.lock", "elsewhere", 1, time.time() - 10)
    with pytest.raises(RippleError, match="host elsewhere, pid 1"):
        DriverLock(tmp_path, "x").acquire()
    _write(tmp_path / "driver.lock", "elsewhere", 1, time.time() - lockmod.STALE_SECONDS - 1)
    with DriverLock(tmp_path, "x") as held:
        assert _read(held.path).host == os.uname().nodename


@pytest.mark.parametrize("command", [["grid", "demo"], ["sweep", "tiny-demo"]])
def test_grid_and_sweep_are_refused_while_a_live_driver_holds_the_experiment(tmp_path, capsys, command):
    from ripple.cli import main

    with DriverLock(tmp_path / "held", "x"):  # this test process plays the live driver
        t0 = time.perf_counter()
        assert main([*command, "--experiment", "held", "--store", str(tmp_path), "--no-tracking", "--limit", "1"]) == 2
        assert time.perf_counter() - t0 < 5  # before tasks load or Ray starts
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1
    assert cap.err.startswith(f"ripple {command[0]}: error: experiment 'held' in store {tmp_path} is already being "
                              f"run by another driver (host {os.uname().nodename}, pid {os.getpid()}, started ")
