"""`ripple trace` on a small store decoded with traces (in-process workers, no Ray) and on a
`ripple generate --trace` file: headless Chromium renders one grid per decoder with each committed
token in its forward's row and the first divergence from the first decoder highlighted; a missing
experiment, task, sample or decoder is one line and exit 2 with nothing written."""
import base64
import io
import json

import pytest
from PIL import Image

from ripple.cli import main
from ripple.platform.experiments.grid import plan
from ripple.platform.experiments.spec import load_spec
from ripple.platform.experiments.store import ResultStore
from ripple.platform.experiments.workers import SampleWorker
from ripple.platform.runtime.failures import first_divergence
from ripple.platform.runtime.reference import Reference
from ripple.platform.runtime.tracing import Trace
from tests.dashboards.cdp import Browser

pytestmark = pytest.mark.usefixtures("chromium")
EXP, TASK = "traced", "lines/replace_random"
SPEC = f"""experiment: {EXP}
models: [ripple-tiny-lines]
tasks: [{TASK}]
limit: 3
decoders: [default, rps]
gen_lengths: [32]
block_lengths: [32]
dtype: float32
traces: true
"""


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A store of default and RPS on three lines problems with traces, written as a grid's driver does."""
    root = tmp_path_factory.mktemp("traced")
    (root / "spec.yaml").write_text(SPEC)
    items = plan(load_spec(str(root / "spec.yaml")))
    worker = SampleWorker("ripple-tiny-lines", dtype="float32", device="cpu")
    store = ResultStore(root / "store", EXP)
    for cell in dict.fromkeys(it.cell.cell_id for it in items):
        store.append(worker.run_batch([it for it in items if it.cell.cell_id == cell]))
    return root / "store", store.read()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(tmp_path_factory.mktemp("chromium"))
    yield b
    b.close()


def _render(browser, page):
    """(per-section DOM facts, screenshot PNG) of a page in headless Chromium."""
    browser.events.clear()  # the previous page's load event must not stand for this one's
    browser.open(page.as_uri())
    facts = browser.js("""Array.from(document.querySelectorAll('section.decoder')).map(s => ({
        decoder: s.dataset.decoder,
        cells: Array.from(s.querySelectorAll('td.tok')).map(td => [+td.dataset.forward, +td.dataset.pos]),
        rows: Array.from(s.querySelectorAll('tbody tr')).map(tr => +tr.dataset.forward),
        diverge: Array.from(s.querySelectorAll('td.diverge')).map(td => [+td.dataset.forward, +td.dataset.pos]),
        width: s.scrollWidth, height: s.scrollHeight}))""")
    shot = browser.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True)
    return facts, Image.open(io.BytesIO(base64.b64decode(shot["data"])))


def _committed(trace: Trace) -> list[list[int]]:
    """(forward, position) of every commit and edit: where the page must draw a token."""
    return sorted([d.forward, c[0]] for d in trace.decisions for c in (*d.commits, *d.edits))


def test_a_stored_sample_under_two_decoders_renders_one_grid_each_with_the_divergence(traced, browser, tmp_path,
                                                                                       capsys):
    store, records = traced
    rows = {r["decoder"]: r for r in records.iter_rows(named=True) if r["sample_id"].endswith("-2")}
    traces = {d: Trace.loads(r["trace"]) for d, r in rows.items()}
    assert rows["default"]["completion"] != rows["rps"]["completion"]  # the sample where RPS leaves default's answer
    page = tmp_path / "page.html"
    assert main(["trace", EXP, "--store", str(store), "--task", TASK, "--sample", "2", "--out", str(page)]) == 0
    assert capsys.readouterr().out.strip() == str(page)
    html = page.read_text()
    assert "http://" not in html and "https://" not in html and "<script src" not in html  # self-contained
    facts, shot = _render(browser, page)
    assert [f["decoder"] for f in facts] == ["default", "rps"]  # default first
    for f in facts:
        trace = traces[f["decoder"]]
        assert sorted(f["cells"]) == _committed(trace)  # each token in the row of the forward that committed it
        assert f["rows"] == sorted({d.forward for d in trace.decisions if d.commits or d.edits or d.remasks})
    div = first_divergence(traces["rps"].decisions, Reference.from_trace(traces["default"].decisions))
    assert facts[0]["diverge"] == [] and facts[1]["diverge"] == [[div.forward, div.position]]
    assert shot.width >= max(f["width"] for f in facts) and shot.height >= sum(f["height"] for f in facts)
    assert len(shot.convert("RGB").getcolors(1 << 16) or range(1 << 16)) > 50  # drawn: text, shades and highlights, not a blank page


def test_a_generate_trace_file_renders_one_grid(browser, tmp_path, capsys):
    events = tmp_path / "rps.jsonl"
    assert main(["generate", "--model", "ripple-tiny-lines", "--prompt", "Sue 4 Ike 5 No 6", "--decoder", "rps",
                 "--gen-length", "16", "--block-length", "16", "--dtype", "float32", "--trace", str(events)]) == 0
    capsys.readouterr()
    assert main(["trace", "--file", str(events), "--model", "ripple-tiny-lines"]) == 0
    page = tmp_path / "rps.html"
    assert capsys.readouterr().out.strip() == str(page)
    trace = Trace.from_events(json.loads(line) for line in events.read_text().splitlines())
    facts, shot = _render(browser, page)
    assert len(facts) == 1 and sorted(facts[0]["cells"]) == _committed(trace) and facts[0]["diverge"] == []
    assert shot.width >= facts[0]["width"] and shot.height >= facts[0]["height"]


@pytest.mark.parametrize("argv,text", [
    (["nope"], "unknown experiment 'nope'"),
    ([EXP, "--task", "lines/nope"], "unknown task 'lines/nope'"),
    ([EXP, "--sample", "999"], "unknown sample '999'"),
    ([EXP, "--decoders", "default,nope"], "unknown decoder 'nope'"),
])
def test_a_missing_experiment_task_sample_or_decoder_is_one_line_and_exit_2(traced, tmp_path, capsys, argv, text):
    store, _ = traced
    args = {"--task": TASK, "--sample": "2", "--out": str(tmp_path / "p.html")}
    args.update(dict(zip(argv[1::2], argv[2::2])))
    assert main(["trace", argv[0], "--store", str(store), *(x for kv in args.items() for x in kv)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and text in err[0]
    assert not (tmp_path / "p.html").exists()


def test_a_store_written_before_traces_loads_and_reports_without_them(traced, tmp_path, capsys):
    """A record file without the trace column (as every store before traces): it reads with traces None, the
    report has no parallel-failure table, and `ripple trace` says how to get traces in one line."""
    _, records = traced
    old = ResultStore(tmp_path / "old", EXP)
    old.dir.mkdir(parents=True)
    records.drop("trace").write_parquet(old.dir / f"part-old-0000001-n{records.height}.parquet")
    back = old.read()
    assert back.height == records.height and back["trace"].null_count() == back.height
    assert main(["report", EXP, "--store", str(tmp_path / "old"), "--no-tracking"]) == 0
    markdown = (tmp_path / "old" / EXP / "report" / "report.md").read_text()
    assert "| rps |" in markdown and "Parallel failures" not in markdown
    capsys.readouterr()
    assert main(["trace", EXP, "--store", str(tmp_path / "old"), "--task", TASK, "--sample", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no decode trace" in err[0] and "traces: true" in err[0]


def test_report_leaderboard_and_mlflow_count_the_parallel_failures_the_records_hold(traced, tmp_path):
    """The parallel-failure table's counts equal those recomputed here from the records, each link is a
    written trace page, and the cell's MLflow metrics carry the same shares."""
    from ripple.platform.experiments.tracking import _failures

    store, records = traced
    rows = {(r["decoder"], r["sample_id"]): r for r in records.iter_rows(named=True)}
    wrong = sorted(s for d, s in rows if d == "rps" and not rows["rps", s]["correct"] and rows["default", s]["correct"])
    assert wrong  # the fixture holds an RPS failure default gets right
    assert main(["report", EXP, "--store", str(store), "--out", str(tmp_path / "report"), "--no-tracking"]) == 0
    assert main(["leaderboard", "--store", str(store), "--out", str(tmp_path / "board")]) == 0
    for folder, page in (("report", "report.md"), ("board", "leaderboard.md")):
        table = (tmp_path / folder / page).read_text().split("Parallel failures")[-1]
        row = next(line for line in table.splitlines() if line.startswith("| rps |")).split(" | ")
        assert row[1] == str(len(wrong))
        links = [part.split("(")[1].rstrip(")") for part in row[5].split() if "(" in part]
        assert len(links) == min(5, len(wrong)) and all((tmp_path / folder / link).is_file() for link in links)
    rps_cell = next(r["cell_id"] for r in rows.values() if r["decoder"] == "rps")
    metrics = _failures(records)[rps_cell]
    assert metrics["parallel_failures_wrong"] == len(wrong) and 0 <= metrics["parallel_failure_share"] <= 100
    # twice %: the report's column and the MLflow metric, from the same count
    head = next(line for line in table.splitlines() if line.startswith("| decoder |")).split(" | ")
    assert head[4] == "twice %" and row[4] == f"{metrics['twice_share']:.1f}"


def test_evaluate_with_traces_keeps_the_decisions_a_grid_stores(traced, tmp_path, capsys):
    """`ripple.evaluate(traces=True)` and `ripple eval --traces --samples-out` keep the same decisions
    (forwards, positions, tokens) as the grid's workers stored for the same samples."""
    import ripple

    _, records = traced
    stored = {r["sample_id"]: Trace.loads(r["trace"]) for r in records.iter_rows(named=True) if r["decoder"] == "rps"}
    ev = ripple.evaluate("ripple-tiny-lines", TASK, "rps", limit=2, gen_length=32, block_length=32, dtype="float32",
                         traces=True)
    out = tmp_path / "samples.jsonl"
    assert main(["eval", "--model", "ripple-tiny-lines", "--task", TASK, "--decoder", "rps", "--limit", "2",
                 "--gen-length", "32", "--block-length", "32", "--dtype", "float32", "--traces", "--json",
                 "--samples-out", str(out)]) == 0
    lines = {s["sample_id"]: s["trace"] for s in map(json.loads, out.read_text().splitlines())}

    def decisions(t):
        return [(d.forward, d.variant, d.phase, [c[:2] for c in d.commits]) for d in t.decisions]

    for row in ev.samples.iter_rows(named=True):
        sid = row["sample_id"]
        assert decisions(Trace.loads(row["trace"])) == decisions(stored[sid]) == decisions(Trace.loads(lines[sid]))
