"""`ripple grid` end to end on a real local Ray, a real Parquet store and a real MLflow SQLite
store: the shipped demo spec (limited) runs, the store and MLflow agree, and a re-run computes
nothing and duplicates no MLflow run.

The grid is the session's `grid_store` (tests/conftest.py): the demo grid at two samples per cell, in
the store the dashboards' tests read too, so the suite runs the demo grid once, not twice."""
import json

import polars as pl
import pytest
from mlflow.tracking import MlflowClient

from ripple.platform.experiments.store import ResultStore
from ripple.platform.experiments.tracking import CELL_TAG

pytestmark = pytest.mark.slow


def _mlflow_runs(store_dir, experiment):
    client = MlflowClient(tracking_uri=f"sqlite:///{store_dir / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    assert exp.artifact_location == (store_dir / "mlartifacts").as_uri()  # explicit, never the working directory
    return client, client.search_runs([exp.experiment_id], max_results=1000)


def test_demo_grid_store_and_mlflow_agree(grid_store, grid_rerun, tmp_path):
    store_dir, grids = grid_store
    out = grids["demo"]
    assert (out["experiment"], out["planned"], out["computed"], out["skipped"]) == ("demo", 120, 120, 0)
    assert len(out["workers"]) == 2 and len({w["pid"] for w in out["workers"]}) == 2  # one per model (--workers 1)

    records = ResultStore(store_dir, "demo").read()
    assert records.height == 120 and records["error"].null_count() == 120  # every sample, none failed
    assert records.select(["cell_id", "sample_id"]).n_unique() == 120
    assert records["nfe"].min() >= 1 and (records["tps"] > 0).all() and records["worker_id"].n_unique() == 2
    assert set(json.loads(records["versions"][0])) >= {"python", "torch", "ray", "ripple-dllm"}
    by_cell = records.group_by("cell_id").agg(
        (pl.col("correct").cast(pl.Float64).mean() * 100).alias("accuracy"), pl.col("nfe").mean().alias("mean_nfe"),
        (pl.col("generated_tokens").sum() / pl.col("decode_seconds").sum()).alias("tps"), pl.len().alias("n"))
    expected = {r["cell_id"]: r for r in by_cell.iter_rows(named=True)}

    client, runs = _mlflow_runs(store_dir, "demo")
    assert client.get_experiment_by_name("demo").tags["mlflow.experimentKind"] == "custom_model_development"
    assert len(runs) == 60 and {r.data.tags[CELL_TAG] for r in runs} == set(expected)
    for run in runs:
        cell = expected[run.data.tags[CELL_TAG]]
        m, p = run.data.metrics, run.data.params
        assert m["accuracy"] == pytest.approx(cell["accuracy"]) and m["mean_nfe"] == pytest.approx(cell["mean_nfe"])
        assert m["tps"] == pytest.approx(cell["tps"]) and m["n"] == cell["n"] == 2
        assert {"model", "task", "decoder", "gen_length", "block_length", "cache", "seed", "params"} <= set(p)
        assert m["accuracy_lo"] <= m["accuracy"] <= m["accuracy_hi"]
        if p["decoder"] == "default":
            assert m["speedup"] == pytest.approx(1.0)
        else:
            assert "speedup" in m and "nfe_speedup" in m and 0 <= m["p_value"] <= 1
        done = records.filter(pl.col("cell_id") == run.data.tags[CELL_TAG])
        # the run spans the time its samples were computed, not the moment they were logged
        assert run.info.end_time == int(done["finished_at"].max() * 1000)
        assert run.info.start_time == int((done["finished_at"] - done["decode_seconds"]).min() * 1000)
        if p["decoder"] == "rps":
            assert p["decoder.lambda"] == "0.2"
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert artifacts == {"samples.parquet", "samples.csv"}
    table = pl.read_parquet(client.download_artifacts(runs[0].info.run_id, "samples.parquet", str(tmp_path)))
    assert table.height == 2 and set(table["cell_id"]) == {runs[0].data.tags[CELL_TAG]}

    _every_surface_gives_the_same_numbers(out, records, runs, tmp_path)

    # the same command again (run by the fixture, before any test read the store): it resumes, with
    # nothing left to compute, and updates the MLflow runs read above rather than adding runs
    again = grid_rerun["summary"]
    assert (again["computed"], again["skipped"]) == (0, 120)
    assert sorted(r.info.run_id for r in runs) == grid_rerun["run_ids_before"]  # updated, not duplicated


def _every_surface_gives_the_same_numbers(grid_json: dict, records: pl.DataFrame, runs, tmp_path) -> None:
    """One set of records through each surface: the grid's JSON, MLflow, the report's cells.csv, `ripple
    eval`'s cell result and a sweep trial's metrics must agree to the last bit (they share metrics.py)."""
    from ripple.dashboards.report import summarize_cells as report_cells
    from ripple.platform.experiments.evaluate import CellResult, SampleResult
    from ripple.platform.experiments.metrics import cell_metrics

    keys = ("accuracy", "accuracy_lo", "accuracy_hi", "mean_nfe", "tps", "canvas_tps", "speedup", "speedup_lo",
            "speedup_hi", "nfe_speedup", "p_value")
    grid = {r["cell_id"]: r for r in grid_json["results"]}
    mlflow = {r.data.tags[CELL_TAG]: r.data.metrics for r in runs}
    report = {r["cell_id"]: r for r in report_cells(records).iter_rows(named=True)}
    report_csv = tmp_path / "cells.csv"
    report_cells(records).write_csv(report_csv)
    csv = {r["cell_id"]: r for r in pl.read_csv(report_csv).iter_rows(named=True)}
    base = {(r["model"], r["task"]): r["cell_id"] for r in grid_json["results"] if r["decoder"] == "default"}
    for cid, g in grid.items():
        rows = records.filter(pl.col("cell_id") == cid)
        base_rows = records.filter(pl.col("cell_id") == base[g["model"], g["task"]])
        trial = cell_metrics(rows, base_rows if g["decoder"] != "default"
                             else None).metrics()
        for k in keys:
            if k not in g:
                continue
            assert mlflow[cid][k] == g[k] == report[cid][k], (cid, k)
            assert csv[cid][k] == pytest.approx(g[k], rel=1e-12), (cid, k)  # CSV text round trip
            if k in trial:
                assert trial[k] == g[k], (cid, k)
        samples = tuple(SampleResult(r["sample_id"], r["prompt_tokens"], r["completion"], r["correct"], {}, r["nfe"],
                                     r["lookahead_nfe"], r["decode_seconds"], r["generated_tokens"], r["tps"],
                                     r["canvas_tps"]) for r in rows.iter_rows(named=True))
        ev = CellResult(samples, {"gen_length": g["gen_length"]}).summary()
        for k in ("accuracy", "accuracy_lo", "accuracy_hi", "mean_nfe", "tps", "canvas_tps"):
            assert ev[k] == g[k], (cid, k)
