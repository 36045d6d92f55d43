"""A grid driver meets what long runs meet, with real processes: a second driver on the same
experiment, a SIGKILL, a damaged part file, a full disk (a real tmpfs), SIGINT and SIGTERM."""
import json
import os
import signal
import subprocess
import time

import polars as pl
import pytest

from ripple.cli import main
from ripple.platform.experiments.lock import _read
from ripple.platform.experiments.store import ResultStore

from tests.platform.gridtools import (env, grid_cmd, kill_group, run_grid, seed_mlflow, signal_when, start_grid,
                                      stored, wait_for_records, wait_group_gone, write_spec)

pytestmark = pytest.mark.slow

# default decoding at gen 128 takes about a second a sample here: long enough for a signal to land mid-grid
SPEC = """experiment: {name}
models: [ripple-tiny]
tasks: [arith]
limit: {limit}
decoders: [{decoders}]
gen_lengths: [{gen}]
block_lengths: [{block}]
workers: {{count: 1, cpus: 1}}
"""


def _spec(tmp_path, name, limit, gen=128, block=32, decoders="default", extra=""):
    return write_spec(tmp_path / f"{name}.yaml",
                      SPEC.format(name=name, limit=limit, gen=gen, block=block, decoders=decoders) + extra)


def _exactly_once(store: ResultStore, total: int) -> None:
    raw = stored(store)
    assert raw.height == total and raw.select(["cell_id", "sample_id"]).n_unique() == total
    assert raw["error"].null_count() == total


def _wait_for(predicate, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_second_driver_is_refused_and_a_killed_drivers_lock_is_taken_over(tmp_path):
    spec, store_dir = _spec(tmp_path, "locked", 4), tmp_path / "store"
    store = ResultStore(store_dir, "locked")
    lock = store_dir / "locked" / "driver.lock"
    first = start_grid(str(spec), "--store", str(store_dir), "--no-tracking")
    try:
        _wait_for(lambda: _read(lock) is not None, first)
        t0 = time.perf_counter()
        second = subprocess.run(grid_cmd(str(spec), "--store", str(store_dir), "--no-tracking"), capture_output=True,
                                text=True, env=env(), timeout=60)
        assert time.perf_counter() - t0 < 10  # refused at once: no plan, no Ray, no model
        assert second.returncode == 2 and second.stdout == "" and second.stderr.count("\n") == 1, second.stderr
        assert f"is already being run by another driver (host {os.uname().nodename}, pid {first.pid}, started " \
               in second.stderr
        wait_for_records(store, 1, first)
        kill_group(first)  # SIGKILL: the lock stays behind, naming a process that no longer exists
    finally:
        if first.poll() is None:
            kill_group(first)
    assert _read(lock).pid == first.pid
    before = stored(store).height
    assert 0 < before < 4
    out = run_grid(str(spec), "--store", str(store_dir), "--no-tracking")
    assert (out["skipped"], out["computed"]) == (before, 4 - before)
    _exactly_once(store, 4)
    assert not lock.exists()  # released on exit


def test_a_truncated_part_file_is_quarantined_recomputed_and_reported(tmp_path, capsys):
    """Decode traces live in the record files, so a damaged one's traces are set aside and recomputed with it."""
    spec = _spec(tmp_path, "damaged", 3, gen=16, block=16, decoders="default, confidence", extra="traces: true\n")
    store_dir = tmp_path / "store"
    store = ResultStore(store_dir, "damaged")
    run_grid(str(spec), "--store", str(store_dir), "--no-tracking")
    files = store.files()
    assert len(files) == 1  # compacted at the end of the run: every record is in this file
    victim = files[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])

    proc = subprocess.run(grid_cmd(str(spec), "--store", str(store_dir), "--no-tracking", "--json"),
                          capture_output=True, text=True, env=env(own_ray=False), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [ln for ln in proc.stderr.splitlines() if victim.name in ln]
    assert len(warnings) == 1, proc.stderr
    assert "ripple: warning: damaged record file" in warnings[0] and "held 6 records" in warnings[0]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["planned"], out["skipped"], out["computed"]) == (6, 0, 6)
    _exactly_once(store, 6)
    assert [p.name for p in store.quarantine.iterdir()] == [victim.name]
    assert stored(store)["trace"].null_count() == 0  # every recomputed sample has its trace again

    assert main(["report", "damaged", "--store", str(store_dir), "--no-tracking"]) == 0
    assert "6 records in 1 damaged file set aside in quarantine/" in capsys.readouterr().out
    markdown = (store_dir / "damaged" / "report" / "report.md").read_text()
    assert "6 records in 1 damaged file set aside in quarantine/" in markdown
    assert "## Parallel failures" in markdown and "| confidence |" in markdown.split("## Parallel failures")[1]


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real tmpfs of 64 KiB (CI runs as root); unmounted at the end."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_the_grid_in_one_line_and_a_rerun_after_freeing_space_completes(tmp_path, small_tmpfs):
    spec, store_dir = _spec(tmp_path, "full", 8, gen=16, block=16, decoders="default, confidence"), small_tmpfs / "store"
    store = ResultStore(store_dir, "full")
    proc = subprocess.run(grid_cmd(str(spec), "--store", str(store_dir), "--no-tracking", "--json"),
                          capture_output=True, text=True, env=env(own_ray=False), timeout=300)  # --json: no progress bar
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-3000:]
    kept = stored(store).height
    assert 0 < kept < 16  # it filled up mid-run
    assert lines[0] == (f"ripple grid: error: result store {store_dir} is full (no space left on device); "
                        f"{kept} samples of experiment 'full' are stored; free space and re-run to resume")
    assert not [p for p in store.dir.iterdir() if p.name.startswith(".tmp")]  # no half-written file

    subprocess.run(["mount", "-o", "remount,size=4m", str(small_tmpfs)], check=True)
    out = run_grid(str(spec), "--store", str(store_dir), "--no-tracking")
    assert (out["skipped"], out["computed"]) == (kept, 16 - kept)
    _exactly_once(store, 16)


def test_a_full_disk_under_the_mlflow_store_is_one_line_and_leaves_no_half_made_database(tmp_path, small_tmpfs):
    """With tracking on, the SQLite store lives in the result store: a disk too small for it stops the
    grid before any decoding with one line, and the half-migrated database is removed, so a re-run
    after freeing space starts clean instead of failing on it."""
    spec, store_dir = _spec(tmp_path, "tracked", 2, gen=16, block=16), small_tmpfs / "store"
    proc = subprocess.run(grid_cmd(str(spec), "--store", str(store_dir), "--json"),
                          capture_output=True, text=True, env=env(own_ray=False), timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0] == (f"ripple grid: error: MLflow tracking store sqlite:///{store_dir / 'mlflow.db'} is full "
                        f"(no space left on device); samples decoded so far are kept in the result store; free "
                        f"space and re-run to resume (or run with --no-tracking)")
    assert not (store_dir / "mlflow.db").exists()
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_tmpfs)], check=True)
    out = run_grid(str(spec), "--store", str(store_dir))
    assert out["computed"] == 2 and (store_dir / "mlflow.db").exists()


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_sigint_and_sigterm_stop_a_grid_cleanly(tmp_path, mlflow_db, signum, status):
    from mlflow.tracking import MlflowClient

    # Confidence's fast cell first: its records are stored within seconds, so the signal lands in the
    # slow default cell after it even on a loaded machine (a signal waits for the sample in flight)
    spec, store_dir = _spec(tmp_path, "stopped", 6, decoders="confidence, default"), tmp_path / "store"
    store = ResultStore(store_dir, "stopped")
    seed_mlflow(store_dir, mlflow_db)
    proc = start_grid(str(spec), "--store", str(store_dir), own_ray=True)  # its Ray is shut down: checked below
    _, _, err = signal_when(proc, lambda: wait_for_records(store, 1, proc), signum, timeout=120)
    assert proc.returncode == status, err[-3000:]
    assert "Traceback" not in err and "what was stored is kept, and a re-run resumes" in err
    records = stored(store)
    assert 0 < records.height < 12 and records.select(["cell_id", "sample_id"]).n_unique() == records.height
    assert records["error"].null_count() == records.height
    assert not [p for p in store.dir.iterdir() if p.name.startswith(".tmp")]
    assert not (store_dir / "stopped" / "driver.lock").exists()
    client = MlflowClient(tracking_uri=f"sqlite:///{store_dir / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("stopped").experiment_id])
    assert all(r.info.status in ("FINISHED", "KILLED") for r in runs)
    wait_group_gone(proc)  # Ray shut down: nothing the driver started is left in its process group
