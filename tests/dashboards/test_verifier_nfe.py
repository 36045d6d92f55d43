"""Forwards of two sizes (issue 58): a decoder with a second model (a verifier) stores `verifier_nfe` per
sample beside its NFE. The count reaches the grid table, the report, the leaderboard (Markdown, CSV, page
text with the comparison rule) and MLflow, as a column only where some cell has it, never added to NFE;
a store written before the column existed loads and reports without it."""
import csv
import html
import random

import polars as pl
import pytest
from mlflow.tracking import MlflowClient

from ripple.dashboards.leaderboard import build_leaderboard
from ripple.dashboards.report import build_report
from ripple.platform.experiments.grid import GridRun, format_table
from ripple.platform.experiments.metrics import VERIFIER_RULE, CellSummary, baseline_ids, summarize_cells
from ripple.platform.experiments.spec import Cell
from ripple.platform.experiments.store import ResultStore, to_frame
from ripple.platform.experiments.tracking import Tracker, tracking_uri
from tests.dashboards import test_report as rep  # its SampleRecord maker

# a decoder name no registry holds: the dashboards read the stored columns, never the decoder's class
DRAFTER = "drafter"
DRAFTER_PARAMS = {"verifier": "qwen2-verifier-tiny", "mixture": 0.7}
# per decoder: (NFE, verifier NFE) of samples s0..s3; the drafter's verifier ran as often as the dLLM but one
# sample's count is odd, so a mean of NFE + verifier NFE (never shown) differs from every figure below
SAMPLES = {"default": [(48, None)] * 4, "confidence": [(12, None), (10, None), (8, None), (6, None)],
           DRAFTER: [(20, 20), (18, 18), (16, 16), (10, 11)]}
MEAN_NFE = {"default": "48.00", "confidence": "9.00", DRAFTER: "16.00"}
VERIFIER = {"default": "-", "confidence": "-", DRAFTER: "16.25"}


def _records(experiment: str = rep.EXP):
    rng, recs = random.Random(11), []
    for decoder, samples in SAMPLES.items():
        params = DRAFTER_PARAMS if decoder == DRAFTER else rep.params(decoder)
        recs += [rep.record(f"{decoder}-arith", decoder, params, "arith", 48, f"s{i}", rng, nfe=n, verifier_nfe=v,
                            experiment=experiment) for i, (n, v) in enumerate(samples)]
    return recs


def _summaries(store: ResultStore) -> list[CellSummary]:
    records = store.read()
    firsts = records.unique(subset="cell_id", keep="first", maintain_order=True)
    by_id = {r["cell_id"]: Cell.from_record(r) for r in firsts.iter_rows(named=True)}
    stats = summarize_cells(records, baseline_ids(by_id))
    return [CellSummary(by_id[cid], stats[cid]) for cid in by_id]


def _table(text: str, key: str) -> dict[str, dict[str, str]]:
    """A Markdown-style table's rows by their `key` column: column name -> cell text."""
    lines = [line for line in text.splitlines() if line.startswith("|") and not line.startswith("|-")
             and not line.startswith("|---")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]]
    return {r[key].split("(")[0]: r for r in rows}


def test_mean_verifier_nfe_is_the_second_models_forwards_per_sample_never_added_to_nfe(tmp_path):
    store = ResultStore(tmp_path, rep.EXP)
    store.append(_records())
    stats = {s.cell.decoder: s.stats for s in _summaries(store)}
    assert stats[DRAFTER].mean_verifier_nfe == pytest.approx(65 / 4) and stats[DRAFTER].mean_nfe == 16.0
    assert stats[DRAFTER].tpf == pytest.approx(stats[DRAFTER].generated_tokens / 64)  # the dLLM's forwards only
    assert stats["default"].mean_verifier_nfe is None and "mean_verifier_nfe" not in stats["default"].metrics()
    assert stats[DRAFTER].metrics()["mean_verifier_nfe"] == pytest.approx(16.25)  # what MLflow and grid JSON log


def test_the_grid_table_shows_verifier_nfe_beside_mean_nfe_with_the_rule(tmp_path):
    store = ResultStore(tmp_path, rep.EXP)
    store.append(_records())
    sums = _summaries(store)
    text = format_table(GridRun(None, store, "r", 12, 0, 12, sums))
    rows = _table(text, "decoder")
    head = list(rows["default"])
    assert head[head.index("verifier NFE") - 1] == "mean NFE"
    assert {d: r["mean NFE"] for d, r in rows.items()} == MEAN_NFE
    assert {d: r["verifier NFE"] for d, r in rows.items()} == VERIFIER
    assert VERIFIER_RULE in text.splitlines()
    plain = ResultStore(tmp_path / "plain", rep.EXP)
    plain.append([r for r in _records() if r.decoder != DRAFTER])
    without = format_table(GridRun(None, plain, "r", 8, 0, 8, _summaries(plain)))
    assert "verifier NFE" not in without and VERIFIER_RULE not in without


def test_the_report_and_the_leaderboard_show_both_counts_and_state_the_rule(tmp_path):
    store = ResultStore(tmp_path / "store", rep.EXP)
    store.append(_records())
    report = build_report(tmp_path / "store", rep.EXP, tmp_path / "report", track=False)
    main = next(t for t in report.tables if t.kind == "main")
    at, nfe = main.header.index("arith verifier NFE"), main.header.index("arith NFE")
    assert at == nfe + 1 and main.note == VERIFIER_RULE
    assert {r[0].split("(")[0]: (r[nfe], r[at]) for r in main.rows} == {d: (MEAN_NFE[d], VERIFIER[d]) for d in SAMPLES}
    assert VERIFIER_RULE in (report.out_dir / "report.md").read_text()

    board = build_leaderboard(tmp_path / "store", tmp_path / "board")
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    assert VERIFIER_RULE in md.split("\n## ")[0]  # the page's reading guide says how two sizes compare
    section = md.split("\n## ")[1]
    rows = _table(section, "decoder")
    assert {d: (r["mean NFE"], r["verifier NFE"]) for d, r in rows.items()} == {
        d: (MEAN_NFE[d], VERIFIER[d]) for d in SAMPLES}
    with (tmp_path / "board" / "leaderboard.csv").open() as fh:
        got = {r["decoder"]: r["mean_verifier_nfe"] for r in csv.DictReader(fh)}
    assert got == {"default": "", "confidence": "", DRAFTER: "16.25"}
    assert html.escape(VERIFIER_RULE) in board.html.read_text()


def test_mean_verifier_nfe_reaches_mlflow_read_back_from_the_sqlite_store(tmp_path):
    store = ResultStore(tmp_path, rep.EXP)
    store.append(_records())
    tracker = Tracker.open(rep.EXP, tmp_path)
    tracker.log_cells(_summaries(store), store.read())
    runs = MlflowClient(tracking_uri=tracking_uri(tmp_path)).search_runs([tracker.experiment_id])
    got = {r.data.params["decoder"]: (r.data.metrics["mean_nfe"], r.data.metrics.get("mean_verifier_nfe"))
           for r in runs}
    assert got == {"default": (48.0, None), "confidence": (9.0, None), DRAFTER: (16.0, pytest.approx(16.25))}


def test_a_store_written_before_verifier_nfe_loads_and_reports(tmp_path):
    store = ResultStore(tmp_path / "store", rep.EXP)
    store.dir.mkdir(parents=True)
    old = [r for r in _records() if r.decoder != DRAFTER]
    to_frame(old).drop("verifier_nfe").write_parquet(store.dir / "part-old-0000001.parquet")  # the schema before
    frame = store.read()
    assert "verifier_nfe" in frame.columns and frame["verifier_nfe"].null_count() == len(old)
    assert all(s.stats.mean_verifier_nfe is None for s in _summaries(store))
    build_leaderboard(tmp_path / "store", tmp_path / "board")
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "confidence" in md and "verifier NFE" not in md and VERIFIER_RULE not in md
    assert pl.read_csv(tmp_path / "board" / "leaderboard.csv")["mean_verifier_nfe"].null_count() == 2
    report = build_report(tmp_path / "store", rep.EXP, tmp_path / "report", track=False)
    main = next(t for t in report.tables if t.kind == "main")
    assert not any("verifier" in h for h in main.header) and main.note == ""
