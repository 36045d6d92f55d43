"""`ripple leaderboard`: on constructed stores (weights never mix, dropped AUP points are reported, bad
input), and on a real store holding the demo grid and an `rps-tiny` grid, where every row's numbers
equal the metrics module's from the records, the grid JSON and MLflow, and headless Chromium sorts the
page's columns without a console error."""
import csv
import hashlib
import html
import json
import random
from pathlib import Path

import polars as pl
import pytest
from mlflow.tracking import MlflowClient

from ripple.cli import main
from ripple.dashboards.leaderboard import build_leaderboard, section_figure
from ripple.dashboards.plots import INTERVAL_CAPTION
from ripple.decoders import get
from ripple.platform.experiments.metrics import aup, cell_metrics
from ripple.platform.experiments.store import ResultStore
from ripple.platform.experiments.tracking import tracking_uri
from tests.dashboards import test_report as rep  # its SampleRecord maker
from tests.dashboards.bars import bars, has_interval_legend, wilson_bars
from tests.clitools import run_cli
from tests.dashboards.cdp import Browser

COLUMNS = ["model", "weights", "task", "decoder", "params", "experiment", "n", "accuracy", "accuracy_lo",
           "accuracy_hi", "tpf", "mean_nfe", "tps", "speedup", "aup", "pareto",  # the list, verbatim
           "mean_edits",  # then token edits per sample (where a cell edited)
           "seed",  # and the cell's seed
           "strict",  # and ParallelBench's strict figure (empty for other tasks)
           "nfe_over_oracle",  # and NFE / oracle (empty without an oracle cell of the same lengths and cache)
           "mean_verifier_nfe"]  # and a second model's forwards per sample (empty for decoders without one)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == COLUMNS
    return [dict(zip(COLUMNS, r)) for r in rows[1:]]


def _cell(store: ResultStore, exp: str, decoder: str, taus: list[float], correct: list[bool], nfe: list[int],
          weights: str, rng: random.Random) -> None:
    """One confidence (or default) cell per tau: 4 samples each, 24 tokens, the given NFE and correctness."""
    recs = []
    for tau, ok, f in zip(taus, correct, nfe):
        p = rep.params(decoder, **({"tau": tau} if decoder == "confidence" else {}))
        cid = f"{exp}-{decoder}-{tau}-{weights}"
        recs += [rep.record(cid, decoder, p, "arith", 48, f"s{i}", rng, experiment=exp, weights=weights, nfe=f,
                            generated_tokens=24, correct=ok if i < 2 else i == 2) for i in range(4)]
    store.append(recs)


def test_rows_of_different_weights_never_mix_and_dropped_points_are_reported(tmp_path, capsys):
    rng = random.Random(1)
    # experiment a, weights w1: confidence at tau 0.9 (75 %), 0.7 (75 %), 0.5 (25 %: 50 points below y_1)
    _cell(ResultStore(tmp_path, "a"), "a", "confidence", [0.9, 0.7, 0.5], [True, True, False], [12, 8, 6], "w1", rng)
    _cell(ResultStore(tmp_path, "a"), "a", "default", [0.0], [True], [48], "w1", rng)
    # experiment b, same model and task, other weights: its own section
    _cell(ResultStore(tmp_path, "b"), "b", "confidence", [0.9], [False], [10], "w2", rng)
    assert main(["leaderboard", "--store", str(tmp_path), "--out", str(tmp_path / "lb")]) == 0
    printed = capsys.readouterr().out
    assert "1 point(s) dropped" in printed
    rows = _read_csv(tmp_path / "lb" / "leaderboard.csv")
    assert {(r["experiment"], r["weights"]) for r in rows} == {("a", "w1"), ("b", "w2")}
    board = build_leaderboard(tmp_path, tmp_path / "lb")
    assert len(board.sections) == 2 and all(len({r.weights for r in s.rows}) == 1 for s in board.sections)
    (w1,) = [s for s in board.sections if s.key["weights"] == "w1"]
    conf = [r for r in w1.rows if r.decoder == "confidence"]
    assert sorted(r.tpf for r in conf) == [2.0, 3.0, 4.0]  # 24 tokens / 12, 8, 6
    # y_max over the section is 75 (confidence and default); the 25 % point is dropped, not refused
    expect = aup([(2.0, 75.0), (3.0, 75.0), (4.0, 25.0)], 75.0)
    assert expect.dropped == ((4.0, 25.0),) and all(r.aup == pytest.approx(expect.aup) for r in conf)
    assert expect.aup == pytest.approx(2 * 75 + (3 - 2) * 75)  # W(75) = 1 at y_max
    assert w1.dropped == ("confidence(tau=0.5) (a): TPF 4.00, accuracy 25.0",)
    page = (tmp_path / "lb" / "leaderboard.html").read_text()
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert w1.dropped[0] in page and w1.dropped[0] in md
    assert "http://" not in page and "https://" not in page and 'src="data:image/png;base64,' in page
    # its plot: each point with its Wilson interval as a bar (3 of 4 correct, or 1 of 4 at tau 0.5), captioned
    fig = section_figure(w1)
    assert bars(fig.axes[0]) == wilson_bars([(0.5, 3, 4), (2.0, 3, 4), (3.0, 3, 4), (4.0, 1, 4)])
    assert has_interval_legend(fig)
    assert page.count(html.escape(INTERVAL_CAPTION)) == md.count(INTERVAL_CAPTION) == 2  # under each section's plot


def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    file = tmp_path / "f.txt"
    file.write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    rng = random.Random(2)
    _cell(ResultStore(tmp_path / "store", "a"), "a", "default", [0.0], [True], [48], "w1", rng)
    cases = [(["--store", str(tmp_path / "missing")], "no result store at"),
             (["--store", str(empty)], "holds no experiment with sample records"),
             (["--store", str(tmp_path / "store"), "--out", str(file)], "is a file, not a directory")]
    for args, text in cases:
        assert main(["leaderboard", *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("ripple leaderboard: error:") and text in err, err
    assert sorted(p.name for p in empty.iterdir()) == [] and file.read_text() == "x"
    assert not (tmp_path / "store" / "leaderboard").exists()


# ---------------------------------------------------------------------------- a real store
@pytest.fixture(scope="module")
def real(grid_store, tmp_path_factory):
    """The store of the demo and rps-tiny grids (conftest), their `--json` summaries, and the
    leaderboard the CLI wrote for it."""
    store, grids = grid_store
    out = tmp_path_factory.mktemp("board") / "lb"
    # in this process: the command's output is the point, not a process (the CLI is a shell over the API)
    proc = run_cli(["leaderboard", "--store", str(store), "--out", str(out)], unset=("MLFLOW_TRACKING_URI", "RIPPLE_STORE"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return store, out, grids, proc.stdout


def _changed(decoder: str, params: dict) -> str:
    defaults = get(decoder).Params().to_dict()
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if defaults.get(k) != v)


@pytest.mark.slow
def test_every_row_equals_the_metrics_module_through_grid_json_csv_and_mlflow(real):
    store, out, grids, printed = real
    rows = _read_csv(out / "leaderboard.csv")
    cells = sum(len(g["results"]) for g in grids.values())  # a row per cell
    assert len(rows) == cells == 87 and str(out / "leaderboard.html") in printed  # demo 60 (the oracle's 6 included), rps-tiny 27
    by_key = {(r["model"], r["experiment"], r["task"], r["decoder"], r["params"]): r for r in rows}
    assert len(by_key) == len(rows)  # one row per model, decoder setting and experiment
    expected = {}
    for exp, summary in grids.items():
        records = ResultStore(store, exp).read()
        client = MlflowClient(tracking_uri=tracking_uri(store))
        runs = {r.data.tags["ripple_cell_id"]: r for r in
                client.search_runs([client.get_experiment_by_name(exp).experiment_id], max_results=1000)}
        for res in summary["results"]:
            cell = records.filter(pl.col("cell_id") == res["cell_id"])
            m = cell_metrics(cell)  # the metrics module, straight from the stored records
            ok = cell.filter(pl.col("error").is_null())
            assert m.tpf == pytest.approx(ok["generated_tokens"].sum() / ok["nfe"].sum())  # TPF's definition
            row = by_key[(res["model"], exp, res["task"], res["decoder"], _changed(res["decoder"], res["params"]))]
            run = runs[res["cell_id"]].data.metrics
            for col in ("accuracy", "tpf", "mean_nfe"):
                assert float(row[col]) == pytest.approx(getattr(m, col), rel=1e-12)
                assert res[col] == pytest.approx(getattr(m, col), rel=1e-12)  # grid JSON
                assert run[col] == pytest.approx(getattr(m, col), rel=1e-12)  # MLflow
            assert row["weights"] == cell["weights"].unique().item()
            curve = (exp, res["model"], res["task"], res["decoder"])  # one gen_length/cache per grid: a decoder's settings
            expected.setdefault(curve, []).append((m.tpf, m.accuracy, row))
    for (exp, model, task, decoder), points in expected.items():
        if decoder == "oracle":  # the section's yardstick: never ranked, no AUP (docs/decoders.md "The oracle")
            assert all(r["aup"] == "" for _, _, r in points)
            continue
        y_max = max(float(r["accuracy"]) for r in rows if r["task"] == task and r["model"] == model
                    and r["decoder"] != "oracle")  # the oracle's accuracy never sets a section's y_max
        score = aup([(t, a) for t, a, _ in points], y_max)
        assert all(float(r["aup"]) == pytest.approx(score.aup, rel=1e-12) for _, _, r in points), (exp, decoder)
    assert len(expected[("rps-tiny", "ripple-tiny", "arith", "confidence")]) == 4  # tau 0.3 ... 0.9: one curve of four points


@pytest.mark.slow
def test_demo_runs_carry_their_task_as_an_mlflow_dataset_input(real):
    store, _, grids, _ = real
    client = MlflowClient(tracking_uri=tracking_uri(store))
    runs = client.search_runs([client.get_experiment_by_name("demo").experiment_id], max_results=1000)
    records = ResultStore(store, "demo").read()
    assert len(runs) == len(grids["demo"]["results"]) == 60  # a run per demo cell: 60 cells (the oracle joined)
    for run in runs:
        (inp,) = run.inputs.dataset_inputs
        ids = records.filter(pl.col("cell_id") == run.data.tags["ripple_cell_id"])["sample_id"].sort().to_list()
        assert inp.dataset.name == run.data.params["task"]
        assert inp.dataset.digest == hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
        assert json.loads(inp.dataset.source)["tags"]["generator"].startswith("ripple.tasks.")


@pytest.mark.slow
@pytest.mark.usefixtures("chromium")
def test_the_page_in_headless_chromium_sorts_by_a_clicked_header_without_console_errors(real, tmp_path):
    _, out, grids, _ = real
    for name in ("leaderboard.html", "leaderboard.md", "leaderboard.csv"):
        assert (out / name).stat().st_size > 0
    browser = Browser(tmp_path / "chromium")
    try:
        browser.open((out / "leaderboard.html").as_uri())
        tables = browser.js("document.querySelectorAll('table.sortable').length")
        rows = browser.js("document.querySelectorAll('table.sortable tbody tr').length")
        plots = browser.js("Array.from(document.querySelectorAll('img.plot')).map(i => i.naturalWidth)")
        assert tables == 6 and rows == 87 and len(plots) == 6 and all(w > 300 for w in plots)  # a plot per model and task
        col = browser.js("Array.from(document.querySelector('table.sortable').tHead.rows[0].cells)"
                         ".map(c => c.textContent).indexOf('TPF')")
        read = (f"Array.from(document.querySelector('table.sortable').tBodies[0].rows)"
                f".map(r => [r.cells[0].textContent, r.cells[{col}].textContent])")
        before = browser.js(read)
        x, y = browser.js(f"(() => {{ const b = document.querySelector('table.sortable').tHead.rows[0].cells[{col}]"
                          f".getBoundingClientRect(); return [b.x + b.width / 2, b.y + b.height / 2]; }})()")
        browser.click(x, y)
        after = browser.js(read)
        assert sorted(before) == sorted(after) and before != after
        assert [float(t) for _, t in after] == sorted(float(t) for _, t in before)  # ascending TPF now
        browser.click(x, y)
        assert [float(t) for _, t in browser.js(read)] == sorted((float(t) for _, t in before), reverse=True)
        assert browser.errors == []
        browser.js("console.error('seen')")  # the check itself sees console errors
        assert browser.errors == ["seen"]
    finally:
        browser.close()


def test_help_shows_examples(capsys):
    with pytest.raises(SystemExit):
        main(["leaderboard", "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "ripple leaderboard --store" in text and "--out" in text
