"""Resume and fault tolerance, with real processes: a driver SIGKILLed at three points resumes
without loss or recomputation, one sample at a time and in batches of 4 (throughput mode: a batch
is stored whole or not at all), each sample's decode trace kept once with its record; a worker
process killed mid-grid is restarted and its samples retried, so the grid completes with every sample."""
import os
import signal

import pytest

from ripple.platform.experiments.store import ResultStore
from ripple.platform.runtime.tracing import Trace

from tests.platform.gridtools import kill_group, run_grid, start_grid, stored, wait_for_records, write_spec

pytestmark = pytest.mark.slow

# Default decoding at gen 128 takes about a second a sample here, so a kill lands between records
# rather than after the whole grid (fast decoders finish 12 samples before a poll can see one). One
# worker: each of a test's four drivers starts (and loads the model in) one process instead of two
# (how many workers is not what these tests are about), and samples come one after another, so
# fewer land between the poll that sees one and the kill.
SPEC = """experiment: resume
models: [ripple-tiny]
tasks: [arith, pyfunc]
limit: {limit}
decoders: [default]
gen_lengths: [128]
block_lengths: [32]
batch_size: {batch}
traces: true
workers: {{count: 1, cpus: 1}}
"""


def _fingerprints(store: ResultStore) -> dict:
    """(run id, finish time, worker, trace) per stored key: identical values mean the same computation."""
    return {(r["cell_id"], r["sample_id"]): (r["run_id"], r["finished_at"], r["worker_id"], r["trace"])
            for r in stored(store).iter_rows(named=True)}


# in batches of 4, 32 samples: enough batches that three kills (each after one more batch) land before the end
@pytest.mark.parametrize("batch,limit", [(1, 6), (4, 16)])
def test_driver_killed_three_times_resumes_without_loss_or_recompute(tmp_path, batch, limit):
    spec = write_spec(tmp_path / "resume.yaml", SPEC.format(limit=limit, batch=batch))
    store_dir = tmp_path / "store"
    store = ResultStore(store_dir, "resume")
    args = (str(spec), "--store", str(store_dir))
    total = 2 * limit
    before_kills = []
    for _ in range(3):  # three different points of the grid: each run stores at least one more sample
        proc = start_grid(*args, "--no-tracking")
        wait_for_records(store, len(_fingerprints(store)) + 1, proc)
        kill_group(proc)
        assert proc.returncode == -signal.SIGKILL
        before_kills.append(_fingerprints(store))
        assert 0 < len(before_kills[-1]) < total
    assert len(before_kills[0]) < len(before_kills[1]) < len(before_kills[2])  # each run added samples

    out = run_grid(*args, "--no-tracking")
    stored_before = len(before_kills[-1])
    assert (out["planned"], out["skipped"], out["computed"]) == (total, stored_before, total - stored_before)

    raw = stored(store)
    final = store.read()
    assert final.height == total and final.select(["cell_id", "sample_id"]).n_unique() == total
    assert raw.height == total  # every sample was written exactly once over the four runs
    after = _fingerprints(store)
    for snapshot in before_kills:  # what was stored before a kill is the very same record at the end
        assert {k: after[k] for k in snapshot} == snapshot
    assert len({run for run, _, _, _ in after.values()}) == 4  # one run id per driver invocation
    for r in final.iter_rows(named=True):  # every sample's trace, whole: one forward per committed token
        decisions = Trace.loads(r["trace"]).decisions
        assert [d.forward for d in decisions] == list(range(1, r["nfe"] + 1))
        assert sorted(c[0] for d in decisions for c in d.commits) == list(range(r["gen_length"]))
    assert final["error"].null_count() == total
    assert set(final["batch_size"]) == {batch}
    sizes = final.group_by("batch_id").len()["len"]
    assert sizes.sum() == total and set(sizes) == {batch}  # every batch stored whole, once (16 = 4 x 4 per cell)
    cells = out["results"]
    assert len(cells) == 2 and all(c["batch_size"] == batch and c["throughput"] > 0 for c in cells)
    assert all(("tps" in c) == (batch == 1) for c in cells)  # TPS is a batch-1 figure


def test_killed_worker_process_is_restarted_and_the_grid_completes(tmp_path):
    # 6 samples (3 per task): the killed process serves the first, the restarted one the rest
    spec = write_spec(tmp_path / "fault.yaml", SPEC.format(limit=3, batch=1).replace("experiment: resume",
                                                                            "experiment: fault"))
    store_dir = tmp_path / "store"
    store = ResultStore(store_dir, "fault")
    proc = start_grid(str(spec), "--store", str(store_dir), "--workers", "1", "--no-tracking")
    try:
        first = wait_for_records(store, 1, proc)
        victim = int(first["worker_id"][0].rsplit(":", 1)[1])  # the worker actor's own pid, from its record
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert proc.returncode == 0, err[-3000:]
    final = store.read()
    assert final.height == 6 and final.select(["cell_id", "sample_id"]).n_unique() == 6
    pids = {int(w.rsplit(":", 1)[1]) for w in final["worker_id"]}
    assert victim in pids and len(pids) == 2  # the restarted actor (a new process) served the rest
    # the samples in flight on the killed process were retried on the restarted one: none failed
    assert final["error"].null_count() == 6
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)
