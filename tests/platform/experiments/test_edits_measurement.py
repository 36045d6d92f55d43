"""Token edits are a measurement: each record holds its sample's edits, the metrics module gives
mean edits per sample per cell, and `ripple eval --json`, the grid table and JSON, MLflow and the
leaderboard CSV show it where a cell edited (one real grid through all of them)."""
import csv
import json
import subprocess

import polars as pl
import pytest
from mlflow.tracking import MlflowClient

from ripple.cli import main
from ripple.platform.experiments.metrics import mean_edits
from ripple.platform.experiments.store import ResultStore
from ripple.platform.experiments.tracking import tracking_uri
from tests.platform.gridtools import env, grid_cmd, run_grid, seed_mlflow

EDITING = ["--set", "tau=0.5", "--set", "edit_tau=0.0", "--set", "max_post_steps=2"]
SPEC = """experiment: edits
models: [ripple-tiny]
tasks: [arith]
limit: 3
gen_lengths: [48]
block_lengths: [16]
workers: {cpus: 1, count: 1}
decoders:
  - default
  - {name: confidence, params: {tau: 0.5, edit_tau: 0.0, max_post_steps: 2}}
"""


def test_mean_edits_is_none_where_no_sample_edited():
    frame = pl.DataFrame({"edits": [0, 3, 1, None]})
    assert mean_edits(frame) == 1.0 and mean_edits(pl.DataFrame({"edits": [0, 0]})) is None
    assert mean_edits(pl.DataFrame({"nfe": [1]})) is None  # records stored before editing existed


def test_eval_json_has_mean_edits_only_for_an_editing_cell(capsys):
    base = ["eval", "--model", "ripple-tiny", "--task", "arith", "--limit", "2", "--json"]
    assert main([*base, "--decoder", "confidence", *EDITING]) == 0
    edited = json.loads(capsys.readouterr().out)
    assert edited["mean_edits"] > 0
    assert main([*base, "--decoder", "confidence"]) == 0
    assert "mean_edits" not in json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_edits_reach_records_grid_table_json_mlflow_and_leaderboard(tmp_path, mlflow_db):
    spec = tmp_path / "edits.yaml"
    spec.write_text(SPEC)
    store_dir = tmp_path / "store"
    seed_mlflow(store_dir, mlflow_db)
    out = run_grid(str(spec), "--store", str(store_dir))
    by_decoder = {r["decoder"]: r for r in out["results"]}
    assert by_decoder["confidence"]["mean_edits"] > 0 and "mean_edits" not in by_decoder["default"]
    records = ResultStore(store_dir, "edits").read()
    conf = records.filter(pl.col("decoder") == "confidence")
    assert conf["edits"].sum() / conf.height == pytest.approx(by_decoder["confidence"]["mean_edits"])
    assert (records.filter(pl.col("decoder") == "default")["edits"] == 0).all()
    # the table (a re-run resumes: everything is stored, the table is printed again)
    table = subprocess.run(grid_cmd(str(spec), "--store", str(store_dir)), capture_output=True, text=True, env=env(own_ray=False),
                           timeout=300)
    assert table.returncode == 0, table.stderr[-2000:]
    head = next(line for line in table.stdout.splitlines() if "accuracy %" in line)
    assert head.rstrip(" |").endswith("edits")
    row = next(line for line in table.stdout.splitlines() if "confidence" in line)
    assert float(row.rstrip(" |").rsplit("|", 1)[1]) == pytest.approx(by_decoder["confidence"]["mean_edits"], abs=0.01)
    # MLflow
    client = MlflowClient(tracking_uri=tracking_uri(store_dir))
    exp = client.get_experiment_by_name("edits")
    runs = {r.data.params["decoder"]: r for r in client.search_runs([exp.experiment_id])}
    assert runs["confidence"].data.metrics["mean_edits"] == pytest.approx(by_decoder["confidence"]["mean_edits"])
    assert "mean_edits" not in runs["default"].data.metrics
    # the leaderboard CSV
    assert main(["leaderboard", "--store", str(store_dir), "--out", str(tmp_path / "lb")]) == 0
    with open(tmp_path / "lb" / "leaderboard.csv") as fh:
        rows = {r["decoder"]: r for r in csv.DictReader(fh)}
    assert float(rows["confidence"]["mean_edits"]) == pytest.approx(by_decoder["confidence"]["mean_edits"])
    assert rows["default"]["mean_edits"] == ""
    assert "<th>edits</th>" in (tmp_path / "lb" / "leaderboard.html").read_text()
