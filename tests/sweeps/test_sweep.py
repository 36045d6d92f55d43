"""A real 4-trial sweep on ripple-tiny: Ray Tune, shared workers, MLflow (SQLite) and the store agree.

One Ray instance serves the module (started by the first test, as `ripple sweep` would), so
the driver's own start-up is paid once; each `run_sweep` then joins it and leaves it running.
"""
import json
import math

import polars as pl
import pytest

from ripple.cli import main
from ripple.dashboards.pareto import ACCURACY_NFE, ACCURACY_TPS, pareto_front
from ripple.platform.experiments.store import ResultStore
from ripple.sweeps.run import run_sweep, trial_frame
from ripple.sweeps.spec import parse_sweep_spec
from tests.platform.gridtools import seed_mlflow

pytestmark = pytest.mark.slow

SPEC = {"experiment": "tiny-sweep", "model": "ripple-tiny", "tasks": {"arith": {"limit": 2}, "pyfunc": {"limit": 1}},
        "decoder": "rps", "search": "grid", "space": {"tau": [0.6, 0.9], "lambda": [0.0, 0.3]},
        "metric": "accuracy", "baseline": True, "gen_length": 32, "block_length": 16, "dtype": "float32",
        "workers": {"cpus": 1}}  # as many workers as cores: trials run side by side, writing the store together
ONE_WORKER = {"count": 1, "cpus": 1}  # two one-sample trials: one worker serves both


@pytest.fixture(scope="module")
def swept(ray_joined, tmp_path_factory, mlflow_db):
    root = tmp_path_factory.mktemp("sweep")
    seed_mlflow(root, mlflow_db)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    spec = parse_sweep_spec(SPEC, "test-sweep.yaml")
    run = run_sweep(spec, root / "store", tracking_uri=uri, progress=False)
    return run, root, uri


def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _store_metrics(frame: pl.DataFrame) -> tuple[float, float, float]:
    """Accuracy (percent correct over every sample of the trial's tasks), mean NFE, TPS recomputed
    from raw records."""
    ok = frame.filter(pl.col("error").is_null())
    tps = ok["generated_tokens"].sum() / ok["decode_seconds"].sum()
    return float(ok["correct"].cast(pl.Float64).mean() * 100), float(ok["nfe"].mean()), float(tps)


def test_tune_results_store_and_mlflow_agree(swept):
    run, root, uri = swept
    assert len(run.trials) == 4 and all(t.agg is not None and t.error is None for t in run.trials)
    assert sorted(dict(t.params)["tau"] for t in run.trials) == [0.6, 0.6, 0.9, 0.9]
    assert {tuple(sorted(dict(t.params).items())) for t in run.trials} == {
        (("lambda", lam), ("tau", tau)) for lam in (0.0, 0.3) for tau in (0.6, 0.9)}

    # Tune's own record of each trial (result.json written by its JSON logger) matches the run's trials
    tune_dirs = list((root / "store" / "tiny-sweep" / "sweep").glob(f"tune-{run.sweep_id}/*/result.json"))
    assert len(tune_dirs) == 4
    by_id = {t.trial_id: t for t in run.trials}
    for path in tune_dirs:
        result = json.loads(path.read_text().strip().splitlines()[-1])
        t = by_id[result["trial_id"]]
        assert result["config"] == dict(t.params)
        assert result["accuracy"] == t.agg.accuracy and result["tps"] == t.agg.tps
        assert result["cell_ids"].split(",") == list(t.cell_ids)

    # the store: every trial cell has its samples, and the metrics recompute from the raw records
    records = ResultStore(root / "store", "tiny-sweep").read()
    assert records.height == 5 * 3  # (4 trials + default) x (2 arith + 1 pyfunc)
    assert records["error"].null_count() == records.height
    for t in run.trials:
        assert len(t.cell_ids) == 2
        rows = records.filter(pl.col("cell_id").is_in(list(t.cell_ids)))
        assert sorted(rows.group_by("task").len().rows()) == [("arith", 2), ("pyfunc", 1)]
        assert {json.loads(p)["tau"] for p in rows["params"]} == {dict(t.params)["tau"]}
        acc, nfe, tps = _store_metrics(rows)
        assert t.agg.accuracy == pytest.approx(acc) and t.agg.mean_nfe == pytest.approx(nfe)
        assert t.agg.tps == pytest.approx(tps)
        assert t.agg.speedup == pytest.approx(tps / run.baseline.tps)
    base = records.filter(pl.col("decoder") == "default")
    assert run.baseline.tps == pytest.approx(_store_metrics(base)[2])

    # MLflow: one parent (the spec) and four children carrying the trials' params and metrics
    client = _client(uri)
    exp = client.get_experiment_by_name("tiny-sweep")
    parent = client.get_run(run.parent_run_id)
    assert parent.data.params["decoder"] == "rps" and parent.data.params["search"] == "grid"
    assert parent.data.metrics["trials"] == 4.0
    children = client.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == 4
    for child in children:
        t = by_id[child.data.tags["ripple_trial_id"]]
        assert child.info.status == "FINISHED"
        assert child.data.params == {f"decoder.{k}": str(v) for k, v in t.params}
        for key in ("accuracy", "mean_nfe", "tps", "speedup"):
            assert child.data.metrics[key] == pytest.approx(getattr(t.agg, key))
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert artifacts == {"sweep_results.csv", "pareto.png"}
    assert (run.out_dir / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_named_front_is_the_pareto_front_of_the_trial_table(swept):
    run, _, _ = swept
    table = pl.read_csv(run.out_dir / "sweep_results.csv")
    ids = table["trial_id"].to_list()
    acc, tps, nfe = table["accuracy"].to_list(), table["tps"].to_list(), table["mean_nfe"].to_list()
    assert run.front_tps == [ids[i] for i in pareto_front(list(zip(acc, tps)), ACCURACY_TPS)]
    assert run.front_nfe == [ids[i] for i in pareto_front(list(zip(acc, nfe)), ACCURACY_NFE)]
    assert table["front_tps"].to_list() == [i in run.front_tps for i in ids]
    assert trial_frame(run)["trial_id"].to_list() == ids
    assert run.front_tps and run.front_nfe  # a non-empty front always exists


def test_rerun_skips_stored_samples_and_report_lists_trials(swept, tmp_path, capsys):
    run, root, uri = swept
    spec = tmp_path / "spec.json"  # JSON is YAML
    spec.write_text(json.dumps(SPEC))
    before = ResultStore(root / "store", "tiny-sweep").read_all().height
    assert main(["sweep", str(spec), "--store", str(root / "store"), "--tracking-uri", uri, "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [t["computed"] for t in out["trials"]] == [0, 0, 0, 0]
    assert out["workers"] == []  # every sample of the grid was stored: no model was loaded
    assert ResultStore(root / "store", "tiny-sweep").read_all().height == before
    again = {tuple(sorted(t["params"].items())): t["metrics"]["accuracy"] for t in out["trials"]}
    assert again == {tuple(sorted(dict(t.params).items())): t.agg.accuracy for t in run.trials}

    from ripple.dashboards.report import build_report, sensitivity_groups

    report = build_report(root / "store", "tiny-sweep", tmp_path / "report", track=False)
    groups = sensitivity_groups(report.cells)
    assert sorted(g[0]["task"] for g in groups) == ["arith", "pyfunc"]
    assert all(names == ["lambda", "tau"] and rows.height == 4 for _, rows, names in groups)


def test_optuna_search_runs_on_the_shared_workers(ray_joined, tmp_path):
    spec = parse_sweep_spec({"model": "ripple-tiny", "tasks": {"arith": {"limit": 1}}, "decoder": "rps",
                             "search": "optuna", "num_samples": 2, "space": {"k_max": {"lo": 2, "hi": 20}},
                             "metric": "score", "weights": {"accuracy": 1.0, "tps": 0.01}, "baseline": False,
                             "gen_length": 32, "block_length": 16, "dtype": "float32", "seed": 3,
                             "workers": ONE_WORKER}, "optuna.yaml")
    run = run_sweep(spec, tmp_path / "store", track=False, progress=False)
    assert len(run.trials) == 2 and all(t.agg and 2 <= dict(t.params)["k_max"] <= 20 for t in run.trials)
    assert all(isinstance(dict(t.params)["k_max"], int) for t in run.trials)
    assert run.parent_run_id is None and run.baseline is None and run.best in {t.trial_id for t in run.trials}
    assert not math.isnan(run.trials[0].agg.tps)


def test_a_sweep_refuses_samples_of_other_weights_before_ray_starts(tmp_path, monkeypatch):
    from ripple.errors import RippleError
    from ripple.platform.experiments.store import SampleRecord
    from ripple.sweeps.spec import load_sweep_spec

    spec = load_sweep_spec("tiny-demo").with_overrides(experiment="stale", limit=1)
    fields = dict(experiment="stale", cell_id="c", sample_id="s", model=spec.model, task="arith", decoder="rps",
                  params="{}", gen_length=48, block_length=16, cache="none", seed=0, dtype="float32", chat=False,
                  split="test", stop_at_eos=False, nfe=5, correct=True, finished_at=1.0, weights="000000000000")
    ResultStore(tmp_path, "stale").append([SampleRecord(**fields)])
    monkeypatch.setattr("ripple.platform.experiments.grid.connect_ray",
                        lambda: pytest.fail("Ray started before the weights check"))
    with pytest.raises(RippleError, match=r"holds 1 samples of ripple-tiny decoded by other weights \(000000000000; "
                                          r"ripple-tiny is now [0-9a-f]{12}\): give a new --experiment"):
        run_sweep(spec, tmp_path, track=False, progress=False)


FIELD = ["dinfer_threshold", "hierarchy", "credit", "pc_sampler", "dus", "slow_fast"]


def _two_trial_spec(name):
    return parse_sweep_spec({"model": "ripple-tiny", "tasks": {"arith": {"limit": 1}}, "decoder": name,
                             "search": "random", "num_samples": 2, "metric": "accuracy", "baseline": False,
                             "gen_length": 48, "block_length": 16, "dtype": "float32", "seed": 5,
                             "workers": ONE_WORKER}, f"{name}.yaml")


@pytest.mark.parametrize("name", FIELD)
def test_each_field_decoder_gets_its_tune_space_from_its_dataclass(name):
    """The two-trial spec of every new decoder: its space is the dataclass's `search=` ranges, and
    configurations Tune draws from it are values the decoder accepts."""
    from ripple.decoders import get

    spec = _two_trial_spec(name)
    fields = get(name).Params.fields_by_name()
    declared = {n for n, f in fields.items() if f.metadata.get("search")}
    assert declared and {d.name for d in spec.space.dims} == declared and spec.num_samples == 2
    space = spec.space.param_space("random")
    for draw in range(2):
        config = {key: domain.sample(random_state=draw) for key, domain in space.items()}
        params = spec.space.params_for(config).to_dict()
        for key in declared:
            lo, hi = fields[key].metadata["search"]
            assert lo <= params[key] <= hi, (name, key, params)


def test_a_field_decoder_sweeps_through_tune_and_the_shared_workers(ray_joined, tmp_path):
    """PC-Sampler's two-trial sweep for real: its prior is the model's shipped one, read on the workers."""
    run = run_sweep(_two_trial_spec("pc_sampler"), tmp_path / "store", track=False, progress=False)
    assert len(run.trials) == 2 and all(t.agg and t.agg.n == 1 for t in run.trials)
    assert len({dict(t.params)["lambda"] for t in run.trials}) == 2
