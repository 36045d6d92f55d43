"""NFE / oracle (issue 51): where a section holds an `oracle` cell, every decoder's row shows its mean NFE
over the oracle's on the same samples, in the leaderboard (Markdown, CSV, the page in headless Chromium),
the report and the metrics MLflow logs; sections without one show no such column."""
import csv
import random

import polars as pl

from ripple.dashboards.leaderboard import build_leaderboard
from ripple.dashboards.report import build_report
from ripple.platform.experiments.metrics import oracle_ids, summarize_cells
from ripple.platform.experiments.spec import Cell
from ripple.platform.experiments.store import ResultStore, to_frame
from tests.dashboards import test_report as rep  # its SampleRecord maker
from tests.dashboards.cdp import Browser

# per decoder: NFE of samples s0..s3; the oracle has no s3 (so the ratio is over s0..s2 only)
NFE = {"default": [48, 40, 32, 24], "confidence": [12, 10, 8, 6], "oracle": [6, 5, 4]}
# sums over s0..s2: default 120, confidence 30, oracle 15 (the means over each cell's own samples would give 7.2x)
RATIO = {"default": "8.00x", "confidence": "2.00x", "oracle": "1.00x"}


def _store(root) -> ResultStore:
    rng, store, recs = random.Random(3), ResultStore(root, rep.EXP), []
    for decoder, nfes in NFE.items():
        p = rep.params(decoder)
        recs += [rep.record(f"{decoder}-arith", decoder, p, "arith", 48, f"s{i}", rng, nfe=n,
                            reference_nfe=NFE["default"][i] if decoder == "oracle" else None)
                 for i, n in enumerate(nfes)]
    for decoder in ("default", "confidence"):  # pyfunc: no oracle cell
        recs += [rep.record(f"{decoder}-pyfunc", decoder, rep.params(decoder), "pyfunc", 48, f"s{i}", rng)
                 for i in range(2)]
    store.append(recs)
    return store


def test_the_ratio_is_over_the_samples_both_cells_decoded(tmp_path):
    records = _store(tmp_path).read()
    firsts = records.unique(subset="cell_id", keep="first")
    cells = {r["cell_id"]: Cell.from_record(r) for r in firsts.iter_rows(named=True)}
    oracles = oracle_ids(cells)
    assert oracles["default-arith"] == "oracle-arith" and oracles["default-pyfunc"] is None
    stats = summarize_cells(records, dict.fromkeys(cells), oracles=oracles)
    assert stats["default-arith"].nfe_over_oracle == 8.0 and stats["confidence-arith"].nfe_over_oracle == 2.0
    assert stats["default-pyfunc"].nfe_over_oracle is None
    assert stats["confidence-arith"].metrics()["nfe_over_oracle"] == 2.0  # what MLflow and the grid JSON log


def test_the_leaderboard_shows_nfe_over_oracle_in_the_oracle_section_and_renders_in_chromium(tmp_path):
    _store(tmp_path / "store")
    board = build_leaderboard(tmp_path / "store", tmp_path / "out")
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    sections = {part.splitlines()[0]: part for part in md.split("\n## ")[1:]}
    arith, pyfunc = (next(v for k, v in sections.items() if k.endswith(f"task {t}")) for t in ("arith", "pyfunc"))
    assert "NFE / oracle" in arith and "NFE / oracle" not in pyfunc
    with (tmp_path / "out" / "leaderboard.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["task"] == "arith"]
    assert {r["decoder"]: r["nfe_over_oracle"] for r in rows} == {"default": "8.0", "confidence": "2.0",
                                                                 "oracle": "1.0"}
    # the oracle reads the answer: the section's yardstick, never ranked (no AUP, off the Pareto front)
    ranked = {r["decoder"]: (r["aup"], r["pareto"]) for r in rows}
    assert ranked["oracle"] == ("", "False") and ranked["confidence"][0] != "" and ranked["confidence"][1] == "True"
    browser = Browser(tmp_path / "chromium")
    try:
        browser.open(board.html.as_uri())
        tables = browser.js("Array.from(document.querySelectorAll('table.sortable')).map(t => "
                            "[Array.from(t.tHead.rows[0].cells).map(c => c.textContent), "
                            "Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).map(c => c.textContent))])")
        with_col = [(head, body) for head, body in tables if "NFE / oracle" in head]
        assert len(with_col) == 1 and len(tables) == 2
        head, body = with_col[0]
        at = head.index("NFE / oracle")
        assert {r[0]: r[at] for r in body} == RATIO
        assert browser.errors == []
    finally:
        browser.close()


def test_the_report_shows_nfe_over_oracle_where_a_context_holds_an_oracle_cell(tmp_path):
    _store(tmp_path / "store")
    report = build_report(tmp_path / "store", rep.EXP, tmp_path / "out", track=False)
    main = next(t for t in report.tables if t.kind == "main")
    at = main.header.index("arith NFE / oracle")
    assert {r[0]: r[at] for r in main.rows} == RATIO
    assert {r[0]: r[main.header.index("pyfunc NFE / oracle")] for r in main.rows} == {
        "default": "-", "confidence": "-", "oracle": "-"}  # no oracle cell on pyfunc
    assert "arith NFE / oracle" in (report.out_dir / "report.md").read_text()


def test_a_decoder_with_its_own_block_and_cache_competes_beside_its_oracle(tmp_path):
    """APD decodes one block under its own cache, so its cells share no block and cache with default's and
    the oracle's; the metrics compare it with them at any block and cache (`oracle_ids`), and so do the report's
    main table (its own context shows NFE / oracle) and "Closest to the oracle" (it competes for arith)."""
    rng, store, recs = random.Random(3), ResultStore(tmp_path / "store", rep.EXP), []
    apd = {**rep.params("apd"), "verifier": "ripple-tiny-ar"}
    plan = {"default": (rep.params("default"), 16, "none", 9, 40), "oracle": (rep.params("oracle"), 16, "none", 9, 4),
            "confidence": (rep.params("confidence"), 16, "none", 7, 5), "apd": (apd, 48, "sliding", 9, 6)}
    for decoder, (params, block, cache, right, nfe) in plan.items():
        recs += [rep.record(f"{decoder}-arith", decoder, params, "arith", 48, f"s{i}", rng, nfe=nfe, block_length=block,
                            cache=cache, correct=i < right) for i in range(10)]
    store.append(recs)
    report = build_report(tmp_path / "store", rep.EXP, tmp_path / "out", track=False)
    closest = next(t for t in report.tables if t.kind == "closest")
    assert len(closest.rows) == 1  # one default and oracle pair: APD's own context has neither
    row = dict(zip(closest.header, closest.rows[0]))
    assert (row["fewest forwards within 1 point"], row["its NFE"], row["NFE / oracle"], row["within 1.5x"]) == (
        "apd(verifier=ripple-tiny-ar)", "6.00", "1.50x", "yes")  # confidence (5 forwards) is 2 points below default: out
    own = next(t for t in report.tables if t.kind == "main" and all(r[0].startswith("apd") for r in t.rows))
    assert own.rows[0][own.header.index("arith NFE / oracle")] == "1.50x"


def test_a_store_written_before_reference_nfe_loads_and_reports(tmp_path):
    store = ResultStore(tmp_path / "store", rep.EXP)
    store.dir.mkdir(parents=True)
    rng = random.Random(0)
    old = [rep.record("default-arith", "default", rep.params("default"), "arith", 48, f"s{i}", rng) for i in range(3)]
    to_frame(old).drop("reference_nfe").write_parquet(store.dir / "part-old-0000001.parquet")  # the schema before
    frame = store.read()
    assert "reference_nfe" in frame.columns and frame["reference_nfe"].null_count() == 3
    build_leaderboard(tmp_path / "store", tmp_path / "board")
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "default" in md and "NFE / oracle" not in md
    report = build_report(tmp_path / "store", rep.EXP, tmp_path / "report", track=False)
    main = next(t for t in report.tables if t.kind == "main")
    assert not any("oracle" in h for h in main.header) and main.rows[0][0] == "default"
    assert pl.read_csv(tmp_path / "board" / "leaderboard.csv")["nfe_over_oracle"].null_count() == 1


def test_the_report_names_the_fewest_forwards_within_one_point_of_default(tmp_path):
    """Closest to the oracle (issue 59): per model and task, default's accuracy, the oracle's NFE and the decoder
    with the fewest forwards among those at most 1 point below default, with its NFE / oracle and whether it is
    within 1.5x; "none" where every other decoder loses more. Accuracies are set through `correct`."""
    rng, store, recs = random.Random(5), ResultStore(tmp_path / "store", rep.EXP), []
    plan = {  # task -> decoder -> (correct out of 10, NFE of every sample)
        "arith": {"default": (9, 40), "oracle": (9, 4), "confidence": (8, 5), "rps": (9, 7), "eb_sampler": (9, 6)},
        "pyfunc": {"default": (10, 48), "oracle": (10, 3), "confidence": (8, 3)}}
    for task, decoders in plan.items():
        for decoder, (right, nfe) in decoders.items():
            recs += [rep.record(f"{decoder}-{task}", decoder, rep.params(decoder), task, 48, f"s{i}", rng, nfe=nfe,
                                correct=i < right) for i in range(10)]
    store.append(recs)
    report = build_report(tmp_path / "store", rep.EXP, tmp_path / "out", track=False)
    table = next(t for t in report.tables if t.kind == "closest")
    rows = {r[1]: r for r in table.rows}
    col = {name: i for i, name in enumerate(table.header)}
    # arith: confidence is 10 points below (out); eb_sampler (6 forwards) beats rps (7) at default's accuracy
    assert rows["arith"][col["fewest forwards within 1 point"]] == "eb_sampler"
    assert rows["arith"][col["oracle NFE"]] == "4.00" and rows["arith"][col["NFE / oracle"]] == "1.50x"
    assert rows["arith"][col["within 1.5x"]] == "yes" and rows["arith"][col["default acc %"]].startswith("90.0 ±")
    assert rows["pyfunc"][col["fewest forwards within 1 point"]] == "none" and rows["pyfunc"][col["within 1.5x"]] == "-"
    assert "## Closest to the oracle" in (report.out_dir / "report.md").read_text()
