"""A two-cell renoise grid on diffusion-gemma-tiny through Ray workers: every sample's seed derives
from the cell's seed and its id, is stored with it, and gives the tokens `ripple eval --seed` gives;
the leaderboard row carries the seed."""
import json

import pytest

from ripple.platform.experiments.evaluate import sample_seed
from ripple.platform.experiments.store import ResultStore
from tests.platform.gridtools import run_grid, seed_mlflow
from tests.platform.runtime.checkpoints import gemma_with_tokenizer

pytestmark = pytest.mark.slow


def test_a_renoise_grid_stores_each_samples_seed(golden, tmp_path, mlflow_db):
    model = gemma_with_tokenizer(golden, tmp_path / "dg")
    spec = tmp_path / "dg.yaml"
    spec.write_text(f"""experiment: dg-tiny
models: [{model}]
tasks: [arith]
limit: 2
decoders:
  - {{name: renoise, params: {{steps: 4}}}}
  - {{name: renoise, params: {{steps: 2, entropy_bound: 1.0}}}}
gen_lengths: [8]
block_lengths: [4]
caches: [prefix]
seeds: [7]
dtype: float32
workers:
  cpus: 1
  count: 1
""")
    store_dir = tmp_path / "store"
    seed_mlflow(store_dir, mlflow_db)
    out = run_grid(str(spec), "--store", str(store_dir))
    assert (out["planned"], out["computed"]) == (4, 4)
    records = ResultStore(store_dir, "dg-tiny").read()
    assert records["error"].null_count() == 4 and set(records["seed"]) == {7}
    for r in records.iter_rows(named=True):
        assert r["sample_seed"] == sample_seed(7, r["sample_id"])  # documented rule: sha256("7:<id>")
        assert r["encoder_nfe"] >= 1 and r["nfe"] > r["encoder_nfe"]

    # ripple eval --seed 7 decodes the same samples to the same completions and forwards
    from ripple.decoders import build
    from ripple.platform.experiments.evaluate import evaluate_cell
    from ripple.platform.runtime.engine import GenerationConfig
    from ripple.platform.runtime.loading import load_model
    from ripple.tasks import get_task

    lm = load_model(str(model), "float32", "cpu")
    cell = evaluate_cell(lm, get_task("arith"), build("renoise", {"steps": "4"}), GenerationConfig(8, 4, "prefix"),
                         limit=2, progress=False, seed=7)
    stored = sorted((r["sample_id"], r["completion"], r["nfe"], r["sample_seed"]) for r in records.iter_rows(named=True)
                    if json.loads(r["params"])["steps"] == 4)
    assert sorted((s.sample_id, s.completion, s.nfe, s.seed) for s in cell.samples) == stored and len(stored) == 2

    from ripple.dashboards.leaderboard import build_rows, load_cells

    rows = [r for s in build_rows(load_cells(store_dir)[0]) for r in s.rows]
    assert len(rows) == 2 and {r.seed for r in rows} == {7} and {r.decoder for r in rows} == {"renoise"}
