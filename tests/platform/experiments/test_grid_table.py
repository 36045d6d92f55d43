"""`ripple grid`'s printed table from known records (no grid run): a strict column where a task reports
ParallelBench's strict figure (`lines/<op>`), `-` for a task without one, none when no task has one; the
header's worker count; NFE / oracle beside a grid's oracle cell."""
import random

from ripple.platform.experiments.grid import ORACLE_NOTE, STRICT_NOTE, GridRun, format_table, workers_text
from ripple.platform.experiments.metrics import CellSummary, baseline_ids, oracle_ids, summarize_cells
from ripple.platform.experiments.spec import Cell
from ripple.platform.experiments.store import ResultStore
from tests.dashboards import test_report as rep  # its SampleRecord maker


def _run(tmp_path, cells) -> GridRun:
    """A finished grid's run over `cells` ((decoder, task, [(correct, score_strict)] per sample)), as stored."""
    store = ResultStore(tmp_path, "lines")
    rng = random.Random(0)
    for decoder, task, samples in cells:
        store.append([rep.record(f"{decoder}-{task}", decoder, rep.params(decoder), task, 32, f"s{i}", rng,
                                 experiment="lines", model="ripple-tiny-lines", correct=ok, score_strict=strict)
                      for i, (ok, strict) in enumerate(samples)])
    records = store.read()
    firsts = records.unique(subset="cell_id", keep="first", maintain_order=True)
    by_id = {r["cell_id"]: Cell.from_record(r) for r in firsts.iter_rows(named=True)}
    stats = summarize_cells(records, baseline_ids(by_id))
    summaries = [CellSummary(by_id[cid], stats[cid]) for cid in by_id]
    return GridRun(None, store, "r", records.height, 0, records.height, summaries)  # the table reads no spec


def test_the_grid_table_prints_the_strict_column_where_a_task_has_one(tmp_path):
    t, f = True, False
    run = _run(tmp_path, [("default", "lines/copy", [(t, 1.0), (t, 1.0), (t, 0.0), (f, 0.0)]),  # strict 50 %
                          ("confidence", "lines/copy", [(t, 1.0), (t, 1.0), (f, 0.0), (f, 0.0)]),  # strict 50 %
                          ("confidence", "lines/shuffle", [(t, 1.0), (t, 1.0), (t, 1.0), (t, 0.0)]),  # strict 75 %
                          ("default", "arith", [(t, None), (f, None), (t, None), (t, None)])])  # no strict figure
    lines = format_table(run).splitlines()
    head = [c.strip() for c in lines[1].strip("|").split("|")]
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:2]): [c.strip() for c in line.strip("|").split("|")]
            for line in lines[3:] if line.startswith("|")}
    col = head.index("strict %")
    assert head[col - 1] == "speedup"  # after the columns every grid has, as the leaderboard places it
    assert {k: r[col] for k, r in rows.items()} == {("lines/copy", "default"): "50.0",
                                                    ("lines/copy", "confidence"): "50.0",
                                                    ("lines/shuffle", "confidence"): "75.0", ("arith", "default"): "-"}
    assert rows[("lines/copy", "default")][head.index("accuracy %")].startswith("75.0 ±")  # accuracy is not strict
    assert STRICT_NOTE in lines


def test_no_strict_column_without_a_strict_figure(tmp_path):
    run = _run(tmp_path, [("default", "arith", [(True, None), (False, None)])])
    table = format_table(run)
    assert "strict %" not in table and STRICT_NOTE not in table


def test_the_header_counts_the_workers_of_a_pool_when_pools_run_in_turn(tmp_path):
    """One pool per (model, dtype), one after another: two models on one worker each ran one wide, not two."""
    run = _run(tmp_path, [("default", "lines/copy", [(True, 1.0)])])
    infos = [{"hardware": "AMD EPYC (1 threads)", "model": m} for m in ("ripple-tiny", "ripple-tiny-bd")]
    run.pools = [[infos[0]], [infos[1]]]
    assert workers_text(run) == "1 worker(s) at a time, one pool per model in turn (2 pools) on AMD EPYC (1 threads)"
    assert "; 1 worker(s) at a time, one pool per model in turn (2 pools) on AMD EPYC" in format_table(run)
    run.pools = [infos * 2]  # one pool of four
    assert workers_text(run) == "4 worker(s) on AMD EPYC (1 threads)"


def test_the_grid_table_prints_nfe_over_oracle_where_the_grid_holds_an_oracle(tmp_path):
    """Beside mean NFE, each row's mean NFE over the oracle cell's on the same samples (the oracle's own: 1.00x);
    no column in a grid without an oracle cell."""
    store = ResultStore(tmp_path, "demo")
    rng = random.Random(0)
    nfes = {"default": [48, 48], "confidence": [6, 9], "oracle": [4, 5]}
    for decoder, per_sample in nfes.items():
        store.append([rep.record(f"{decoder}-arith", decoder, rep.params(decoder), "arith", 48, f"s{i}", rng,
                                 experiment="demo", nfe=nfe, correct=True) for i, nfe in enumerate(per_sample)])
    records = store.read()
    firsts = records.unique(subset="cell_id", keep="first", maintain_order=True)
    by_id = {r["cell_id"]: Cell.from_record(r) for r in firsts.iter_rows(named=True)}
    stats = summarize_cells(records, baseline_ids(by_id), oracles=oracle_ids(by_id))
    run = GridRun(None, store, "r", records.height, 0, records.height, [CellSummary(by_id[c], stats[c]) for c in by_id])
    lines = format_table(run).splitlines()
    head = [c.strip() for c in lines[1].strip("|").split("|")]
    col = head.index("NFE / oracle")
    assert head[col - 1] == "mean NFE"
    rows = {line.strip("|").split("|")[1].strip(): line.strip("|").split("|")[col].strip()
            for line in lines[3:] if line.startswith("|")}
    assert rows == {"default": f"{96 / 9:.2f}x", "confidence": f"{15 / 9:.2f}x", "oracle": "1.00x"}
    assert ORACLE_NOTE in lines
    without = _run(tmp_path / "plain", [("default", "arith", [(True, None), (False, None)])])
    assert "NFE / oracle" not in format_table(without) and ORACLE_NOTE not in format_table(without)
