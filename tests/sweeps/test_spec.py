"""Sweep specs: shipped ones validate, malformed ones fail in one line with exit status 2."""
import pytest

from ripple.cli import main
from ripple.errors import RippleError
from ripple.platform.experiments.spec import parse_spec
from ripple.sweeps.spec import SPECS_DIR, load_sweep_spec, parse_sweep_spec, shipped_sweep_specs

BASE = {"model": "ripple-tiny", "tasks": {"arith": {"limit": 3}}, "decoder": "rps", "gen_length": 48,
        "block_length": 16, "space": {"lambda": [0.0, 0.2]}}


def test_shipped_specs_validate():
    assert shipped_sweep_specs() == ["diffusion-gemma", "learned-threshold", "rps-bd-freefunc", "rps-freefunc", "rps-lambda", "rps-table3",
                                    "tiny-demo"]
    for name, model in (("rps-freefunc", "ripple-tiny"), ("rps-bd-freefunc", "ripple-tiny-bd")):
        dev = load_sweep_spec(name)
        assert dev.split == "dev" and dev.tasks == (("freefunc", 200, "{}"),) and dev.model == model  # tuned off the test problems
    assert load_sweep_spec("rps-bd-freefunc").trial_count() == 24
    lam = load_sweep_spec("rps-lambda")
    assert [d.grid_values() for d in lam.space.dims] == [[0.0, 0.1, 0.2, 0.3, 0.4, 0.5]]
    assert lam.trial_count() == 6 and lam.baseline
    table3 = load_sweep_spec("rps-table3")
    assert {d.name: (d.lo, d.hi) for d in table3.space.dims} == {"k_max": (2, 20), "r": (0.01, 0.5),
                                                                  "tau_pivot": (0.7, 0.99)}
    tiny = load_sweep_spec(str(SPECS_DIR / "tiny-demo.yaml"))
    assert tiny.model == "ripple-tiny" and [t for t, _, _ in tiny.tasks] == ["arith", "pyfunc"]
    assert tiny.trial_count() == 4


def test_a_tasks_sandbox_options_reach_every_trial_cell():
    sweep = parse_sweep_spec({**BASE, "tasks": {"humaneval": {"limit": 2, "timeout_s": 10}, "arith": {"limit": 3}}},
                             "t.yaml")
    cells = sweep.cells_for("rps", {"lambda": 0.1})
    assert [(c.task, c.limit, c.task_options) for c in cells] == [("humaneval", 2, '{"timeout_s":10}'), ("arith", 3, "{}")]
    assert "humaneval (2, {\"timeout_s\":10})" in sweep.describe()


def test_trial_cells_are_grid_cells():
    """A trial's cell ids are the ids a grid spec gives the same settings, so reports treat them alike."""
    sweep = parse_sweep_spec({**BASE, "dtype": "float32"}, "t.yaml")
    params = sweep.space.params_for({"lambda": 0.2}).to_dict()
    grid = parse_spec({"models": ["ripple-tiny"], "tasks": {"arith": {"limit": 3}}, "dtype": "float32",
                       "decoders": [{"name": "rps", "params": {"lambda": 0.2}}, "default"],
                       "gen_lengths": [48], "block_lengths": [16]}, "g.yaml")
    assert [c.cell_id for c in sweep.cells_for("rps", params)] == [grid.cells[0].cell_id]
    assert [c.cell_id for c in sweep.baseline_cells()] == [grid.cells[1].cell_id]


def test_overrides_from_the_command_line():
    spec = parse_sweep_spec({**BASE, "search": "random", "num_samples": 5}, "t.yaml")
    out = spec.with_overrides(experiment="x1", limit=2, trials=3)
    assert (out.experiment, out.tasks, out.num_samples) == ("x1", (("arith", 2, "{}"),), 3)


def test_batch_size_keeps_cell_ids_and_needs_a_metric_it_measures():
    one = parse_sweep_spec({**BASE, "metric": "throughput"}, "t.yaml")
    eight = one.with_overrides(batch_size=8)
    assert (one.batch_size, eight.batch_size, eight.grid_spec(()).batch_size) == (1, 8, 8)
    assert [c.cell_id for c in one.baseline_cells()] == [c.cell_id for c in eight.baseline_cells()]
    assert "batch size 8" in eight.describe()
    with pytest.raises(RippleError, match="metric 'tps' is measured at batch 1, and a sweep at batch_size 8"):
        parse_sweep_spec({**BASE, "metric": "tps", "batch_size": 8}, "t.yaml")
    with pytest.raises(RippleError, match="--batch-size 4: metric 'speedup' is measured at batch 1"):
        parse_sweep_spec({**BASE, "metric": "score", "weights": {"accuracy": 1, "speedup": 1}}, "t.yaml"
                         ).with_overrides(batch_size=4)
    with pytest.raises(RippleError, match="--batch-size must be a positive number"):
        one.with_overrides(batch_size=0)


@pytest.mark.parametrize("text, message", [
    ("model: [unclosed", "is not valid YAML"),
    ("- a\n- b\n", "expected a mapping"),
    ("model: ripple-tiny\ntasks: [arith]\ndecoder: rps\ngen_length: 48\n", "missing key 'block_length'"),
    ("model: ripple-tiny\ntasks: [arith]\ndecoder: rsp\ngen_length: 48\nblock_length: 16\n",
     "unknown decoder 'rsp' (did you mean 'rps'?)"),
    ("model: ripple-tiny\ntasks: [arith]\ndecoder: rps\ngen_length: 48\nblock_length: 16\nsearch: bayes\n",
     "unknown search 'bayes'; accepted: grid, random, optuna"),
    ("model: ripple-tiny\ntasks: [arith]\ndecoder: rps\ngen_length: 48\nblock_length: 16\nmetric: f1\n",
     "unknown metric 'f1'"),
    ("model: ripple-tiny\ntasks: [arith]\ndecoder: rps\ngen_length: 48\nblock_length: 16\nmetric: score\n",
     "metric 'score' needs 'weights'"),
    ("model: ripple-tiny\ntasks: [arith]\ndecoder: rps\ngen_length: 48\nblock_length: 16\n"
     "space: {lambda: [0.1, -1]}\n", "lambda=-1.0 is invalid; accepted: float in [0.0, 100.0]"),
    ("model: ripple-tiny\ntasks: [arith]\ndecoder: rps\ngen_length: 48\nblock_length: 10\n", "block_length"),
    ("model: ripple-tiny\ntasks: [nope]\ndecoder: rps\ngen_length: 48\nblock_length: 16\n", "nope"),
    ("model: ripple-tiny\ntasks: [arith]\ndecoder: rps\ngen_length: 48\nblock_length: 16\nspaces: {}\n",
     "unknown key 'spaces' (did you mean 'space'?)"),
    ("model: ripple-tiny\ntasks: [arith]\ndecoder: rps\ngen_length: 48\nblock_length: 16\nmodel: other\n",
     "key 'model' given twice (line 6; first at line 1)"),
    ("model: ripple-tiny\ntasks: {arith: {limit: 3}}\ndecoder: rps\ngen_length: 48\nblock_length: 16\n"
     "space:\n  lambda: [0.1, 0.2]\n  tau: [0.8]\n  lambda: [0.3]\n", "key 'lambda' given twice (line 9; first at line 7)"),
])
def test_malformed_spec_is_one_line_exit_2(tmp_path, capsys, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["sweep", str(path), "--experiment", "x", "--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ripple sweep: error: sweep spec ") and message in err, err
    assert not (tmp_path / "s").exists()  # nothing written


def test_cli_usage_errors_and_dry_run(tmp_path, capsys):
    assert main(["sweep", "no-such-spec", "--experiment", "x"]) == 2
    assert "shipped spec: diffusion-gemma, learned-threshold, rps-bd-freefunc, rps-freefunc, rps-lambda, rps-table3, tiny-demo" in capsys.readouterr().err
    assert main(["sweep", "tiny-demo", "--experiment", "x", "--trials", "3"]) == 2
    assert "--trials applies to random and optuna" in capsys.readouterr().err
    assert main(["sweep", "tiny-demo", "--experiment", "bad name"]) == 2
    assert "experiment name 'bad name' is invalid" in capsys.readouterr().err
    assert main(["sweep", "tiny-demo", "--experiment", "ok", "--limit", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 trials over tau in {0.6, 0.9}; lambda in {0.0, 0.3}" in out and "arith (2), pyfunc (2)" in out
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--help"])
    assert exc.value.code == 0 and "ripple sweep tiny-demo" in capsys.readouterr().out


def test_eos_early_stop_reaches_every_trial_cell():
    sweep = parse_sweep_spec({**BASE, "eos_early_stop": True}, "t.yaml")
    cells = sweep.cells_for("rps", {"lambda": 0.2})
    assert cells and all(c.eos_early_stop for c in cells)
    plain = parse_sweep_spec(BASE, "t.yaml").cells_for("rps", {"lambda": 0.2})
    assert {c.cell_id for c in cells}.isdisjoint(c.cell_id for c in plain)
    with pytest.raises(RippleError, match="eos_early_stop"):
        parse_sweep_spec({**BASE, "eos_early_stop": "yes please"}, "t.yaml")


def test_the_diffusion_gemma_sweep_searches_renoise_dataclass_ranges():
    from ripple.decoders import get

    spec = load_sweep_spec("diffusion-gemma")
    assert spec.decoder == "renoise" and not spec.baseline and spec.cache == "prefix"
    fields = get("renoise").Params.fields_by_name()
    assert [d.name for d in spec.space.dims] == list(fields)
    for d in spec.space.dims:  # every range is the dataclass's `search=`
        assert (d.lo, d.hi) == fields[d.name].metadata["search"] and d.kind is type(fields[d.name].default)
