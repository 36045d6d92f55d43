"""MLflow tracking on a real SQLite store: one run per cell, found and updated on re-logging,
speedup only against a Default cell of the same settings; `ripple ui` serves it on localhost."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from mlflow.tracking import MlflowClient

from ripple.cli import main
from ripple.platform.experiments.grid import plan, summarize
from ripple.platform.experiments.spec import parse_spec
from ripple.platform.experiments.store import ResultStore
from ripple.platform.experiments.tracking import CELL_TAG, Tracker, tracking_uri

from tests.platform.gridtools import env


def _spec(decoders):
    return parse_spec({"experiment": "t", "models": ["ripple-tiny"], "tasks": ["arith"], "limit": 3,
                       "decoders": decoders, "gen_lengths": [48], "block_lengths": [16]}, "t.yaml")


def _store(tmp_path, spec, nfe):
    """Records as workers would send them: `nfe[decoder]` forwards and 0.5 s per sample."""
    store = ResultStore(tmp_path, "t")
    items = plan(spec)
    store.append([it.record(nfe=nfe[it.cell.decoder], generated_tokens=20, decode_seconds=0.5 * nfe[it.cell.decoder] / 48,
                            correct=i % 3 == 0, prompt_tokens=30, completion="x", tps=1.0, canvas_tps=1.0)
                  for i, it in enumerate(items)])
    return store, items


def test_one_run_per_cell_updated_not_duplicated(tmp_path):
    spec = _spec(["default", "confidence"])
    store, items = _store(tmp_path, spec, {"default": 48, "confidence": 24})
    sums = summarize(spec, items, store.read())
    tracker = Tracker.open("t", tmp_path)
    first = tracker.log_cells(sums, store.read(), spec.path)
    second = Tracker.open("t", tmp_path).log_cells(sums, store.read(), spec.path)
    assert first == second and len(first) == 2
    client = MlflowClient(tracking_uri=tracking_uri(tmp_path))
    runs = client.search_runs([tracker.experiment_id])
    assert len(runs) == 2
    conf = next(r for r in runs if r.data.params["decoder"] == "confidence")
    assert conf.data.metrics["nfe_speedup"] == pytest.approx(2.0) and conf.data.metrics["speedup"] == pytest.approx(2.0)
    assert conf.data.metrics["accuracy"] == pytest.approx(100 / 3) and conf.data.metrics["mean_nfe"] == 24
    assert conf.data.params["decoder.tau"] == "0.9" and conf.info.status == "FINISHED"
    assert conf.data.tags[CELL_TAG] == next(s.cell_id for s in sums if s.cell.decoder == "confidence")


def test_no_speedup_without_a_default_cell_and_tracking_uri_override(tmp_path, monkeypatch):
    spec = _spec(["confidence"])
    store, items = _store(tmp_path, spec, {"confidence": 24})
    sums = summarize(spec, items, store.read())
    assert sums[0].speedup is None and "speedup" not in sums[0].metrics()
    other = tmp_path / "elsewhere.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{other}")
    Tracker.open("t", tmp_path).log_cells(sums, store.read())
    assert other.exists() and not (tmp_path / "mlflow.db").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ripple_ui_serves_the_store_on_localhost(tmp_path):
    Tracker.open("ui-check", tmp_path)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ripple.cli", "ui", "--store", str(tmp_path), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env(), start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search"
        deadline = time.time() + 90
        while True:
            try:
                req = urllib.request.Request(url, data=json.dumps({"max_results": 10}).encode(),
                                             headers={"Content-Type": "application/json"})
                body = json.loads(urllib.request.urlopen(req, timeout=5).read())
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() else "timeout"
                time.sleep(0.5)
        assert "ui-check" in {e["name"] for e in body["experiments"]}
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
        assert listening and all("127.0.0.1:" in line for line in listening.splitlines())  # localhost only
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_ripple_ui_without_a_store_is_one_line(tmp_path, capsys):
    assert main(["ui", "--store", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no MLflow store at" in err


def test_each_run_carries_its_task_as_a_dataset_input_once(tmp_path):
    import hashlib

    spec = _spec(["default", "confidence"])
    store, items = _store(tmp_path, spec, {"default": 48, "confidence": 24})
    sums = summarize(spec, items, store.read())
    tracker = Tracker.open("t", tmp_path)
    ids = tracker.log_cells(sums, store.read(), spec.path)
    tracker._logged.clear()  # as a later `ripple grid` would: log every cell again
    tracker.log_cells(sums, store.read(), spec.path)
    client = MlflowClient(tracking_uri=tracking_uri(tmp_path))
    problems = sorted({it.example.id for it in items})
    for run_id in ids.values():
        (inp,) = client.get_run(run_id).inputs.dataset_inputs  # one input, not one per logging
        assert inp.dataset.name == "arith"
        assert inp.dataset.digest == hashlib.sha256("\n".join(problems).encode()).hexdigest()[:16]
        assert inp.dataset.source_type == "code" and "ripple.tasks.arith" in inp.dataset.source
        assert {t.key: t.value for t in inp.tags}["mlflow.data.context"] == "test"
    found = client.search_runs([tracker.experiment_id], filter_string="dataset.name = 'arith'")
    assert len(found) == 2  # the runs table's dataset filter finds them


def test_runs_left_running_by_a_stopped_grid_are_closed(tmp_path):
    """A grid stopped while logging a cell leaves its run RUNNING; the driver marks such runs KILLED
    (a signal) and leaves runs of other experiments and runs without a cell alone."""
    tracker = Tracker.open("t", tmp_path)
    client = tracker.client
    cell = client.create_run(tracker.experiment_id, tags={CELL_TAG: "c1"}).info.run_id
    done = client.create_run(tracker.experiment_id, tags={CELL_TAG: "c2"}).info.run_id
    client.set_terminated(done, "FINISHED")
    other = client.create_run(tracker.experiment_id).info.run_id  # not a cell's run (e.g. a report run)
    tracker.end_unfinished("KILLED")
    assert [client.get_run(r).info.status for r in (cell, done, other)] == ["KILLED", "FINISHED", "RUNNING"]


def test_nfe_over_oracle_reaches_mlflow_for_every_cell_beside_an_oracle_cell(tmp_path):
    """The oracle's cell is the yardstick: each cell's run gets its mean NFE over the oracle's (issue 51)."""
    spec = _spec(["default", "confidence", "oracle"])
    store, items = _store(tmp_path, spec, {"default": 48, "confidence": 24, "oracle": 12})
    sums = summarize(spec, items, store.read())
    tracker = Tracker.open("t", tmp_path)
    tracker.log_cells(sums, store.read(), spec.path)
    runs = MlflowClient(tracking_uri=tracking_uri(tmp_path)).search_runs([tracker.experiment_id])
    ratios = {r.data.params["decoder"]: r.data.metrics.get("nfe_over_oracle") for r in runs}
    assert ratios == {"default": pytest.approx(4.0), "confidence": pytest.approx(2.0), "oracle": pytest.approx(1.0)}
