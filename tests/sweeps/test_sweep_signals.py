"""`ripple sweep` stopped by SIGINT or SIGTERM while a trial decodes stops as a grid does (exit 130 / 143,
samples stored once, MLflow runs KILLED, one line), and the same command then computes only the rest and
prints the table an uninterrupted sweep prints.

The sweep is the smallest that shows it: ripple-tiny, 4 arith samples, the default baseline and two
top-k trials (k = 1 and 2 tokens per forward: a trial decodes for about a second). The interrupted driver is a
subprocess starting its own Ray, as a user's would; the reference and the resumed runs run in this
process, joined to its shared Ray head.
"""
import re
import signal
import subprocess
import time

import polars as pl
import pytest

from ripple.cli import main
from ripple.platform.experiments.store import ResultStore

from tests.platform.gridtools import seed_mlflow, signal_when, start_grid, stored, wait_group_gone, write_spec

pytestmark = pytest.mark.slow

LIMIT = 4
SPEC = f"""experiment: stopped
model: ripple-tiny
tasks: {{arith: {{limit: {LIMIT}}}}}
decoder: topk
search: grid
space: {{k: [1, 2]}}
metric: accuracy
baseline: true
gen_length: 32
block_length: 16
dtype: float32
seed: 0
workers: {{count: 1, cpus: 1}}
"""
PLANNED = 3 * LIMIT  # (default + 2 trials) x the samples


def _comparable(table: str) -> list[str]:
    """The printed table without what wall time decides (TPS, speedup, the accuracy-vs-TPS front) and
    with Tune's per-run prefix of the trial ids (`4906f_00001` -> `trial_00001`); the rest is decided by
    the samples' tokens, so an interrupted and resumed sweep must print it exactly."""
    table = re.sub(r"\b[0-9a-f]{5}_(\d{5})\b", r"trial_\1", table)
    lines = [ln for ln in table.splitlines() if ln.startswith(("sweep ", "| ", "Pareto front (accuracy vs mean NFE)"))]
    header = [c.strip() for c in lines[1].strip("|").split("|")]
    keep = [i for i, c in enumerate(header) if c not in ("TPS", "speedup")]
    out = [lines[0]]
    for ln in lines[1:]:
        if not ln.startswith("|"):
            out.append(ln)
            continue
        cells = [c.strip() for c in ln.strip("|").split("|")]
        cells = [cells[i] for i in keep]
        cells[-1] = " ".join(w for w in cells[-1].replace("acc-TPS", "").split() if w != "+")
        out.append(" | ".join(cells))
    best = re.search(r"best by \S+ \(\S+\): \S+;", table)
    return out + [best.group(0)]


@pytest.fixture(scope="module")
def reference(ray_joined, tmp_path_factory):
    """The same sweep, uninterrupted: its printed table."""
    from ripple.api import sweep_spec
    from ripple.sweeps.run import format_table, run_sweep

    root = tmp_path_factory.mktemp("reference")
    spec = write_spec(root / "spec.yaml", SPEC)
    return _comparable(format_table(run_sweep(sweep_spec(str(spec)), root / "store", track=False, progress=False)))


def _wait_for_a_trial_sample(store: ResultStore, proc, timeout: float = 120) -> pl.DataFrame:
    """The store as soon as it holds a trial's first sample (its trial is decoding the others). Files
    are read only when a new one appears: the polling must not take the CPU the sweep needs."""
    deadline, seen = time.time() + timeout, set()
    while time.time() < deadline:
        files = set(store.files())
        if files - seen:
            seen = files
            rows = stored(store)
            if rows.filter(pl.col("decoder") == "topk").height:
                return rows
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        time.sleep(0.05)
    raise AssertionError(f"no trial sample within {timeout}s")


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_trial_stops_the_sweep_and_the_same_command_completes_it(request, tmp_path, capsys,
                                                                                   mlflow_db, signum, status):
    from mlflow.tracking import MlflowClient

    spec, store_dir = write_spec(tmp_path / "spec.yaml", SPEC), tmp_path / "store"
    seed_mlflow(store_dir, mlflow_db)
    store = ResultStore(store_dir, "stopped")
    proc = start_grid(str(spec), "--store", str(store_dir), command="sweep", stdout=subprocess.PIPE,
                      own_ray=True)  # its Ray is shut down: checked below
    before, out, err = signal_when(proc, lambda: _wait_for_a_trial_sample(store, proc), signum, timeout=30)
    assert proc.returncode == status, err[-3000:]
    trial = before.filter(pl.col("decoder") == "topk")
    assert trial.select("cell_id").n_unique() == 1 and trial.height < LIMIT  # the signal landed mid-trial

    # every sample stored before the signal is there once, without error; the rest is missing
    records = stored(store)
    assert records.select(["cell_id", "sample_id"]).n_unique() == records.height < PLANNED
    assert records["error"].null_count() == records.height
    kept = set(zip(records["cell_id"], records["sample_id"]))
    assert set(zip(before["cell_id"], before["sample_id"])) <= kept
    assert not [p for p in store.dir.iterdir() if p.name.startswith(".tmp")]
    assert not (store_dir / "stopped" / "driver.lock").exists()
    lines = [ln for ln in err.splitlines() if ln.startswith("ripple sweep:")]
    assert lines == [f"ripple sweep: {'interrupted' if signum == signal.SIGINT else 'terminated (SIGTERM)'}; "
                     "what was stored is kept, and a re-run resumes"], err[-3000:]
    assert "Traceback" not in err and "Tuner.restore" not in err
    assert out == ""  # no table, and no Ray retrying the trials' batches on workers killed under them
    client = MlflowClient(tracking_uri=f"sqlite:///{store_dir / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("stopped").experiment_id])
    assert [r.info.status for r in runs] == ["KILLED"]  # the sweep's parent run, open since it started
    wait_group_gone(proc)  # Ray shut down: nothing the driver started is left in its process group

    # the same command computes only the missing samples and prints the uninterrupted sweep's table (the
    # reference is computed once, for both signals, after the first stopped run)
    reference = request.getfixturevalue("reference")
    capsys.readouterr()
    assert main(["sweep", str(spec), "--store", str(store_dir)]) == 0
    table = capsys.readouterr().out
    assert _comparable(table) == reference, table
    after = stored(store)
    assert after.select(["cell_id", "sample_id"]).n_unique() == after.height == PLANNED
    assert records["run_id"].n_unique() == 1  # the stopped invocation's
    assert after.filter(pl.col("run_id") != records["run_id"][0]).height == PLANNED - records.height
    assert set(zip(after["cell_id"], after["sample_id"], after["run_id"])) >= \
        set(zip(records["cell_id"], records["sample_id"], records["run_id"]))
    statuses = sorted(r.info.status for r in client.search_runs([runs[0].info.experiment_id]))
    assert statuses == ["FINISHED"] * 3 + ["KILLED"]  # the new parent and its two trials
