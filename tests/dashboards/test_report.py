"""`ripple report` on a small real result store: every table number equals what the records
give when recomputed here by hand, the PNGs are valid, the HTML is self-contained, and the
folder is logged to MLflow once per experiment."""
import csv
import json
import random
import re

import polars as pl
import pytest
from PIL import Image

from ripple.cli import main
from ripple.dashboards.plots import INTERVAL_CAPTION
from ripple.dashboards.report import build_report, pareto_figure, sensitivity_figure, sensitivity_groups
from ripple.decoders import get
from ripple.platform.experiments.store import ResultStore, SampleRecord
from tests.dashboards.bars import bars, has_interval_legend, wilson_bars

EXP = "exp"


def params(decoder: str, **changed) -> dict:
    return {**get(decoder).Params().to_dict(), **changed}


# (decoder, params, task, gen_length): the demo grid plus a lambda sweep and a second length
CELLS = [(d, params(d), t, 48) for t in ("arith", "pyfunc") for d in ("default", "confidence")]
CELLS += [("rps", params("rps", **{"lambda": lam}), t, 48) for t in ("arith", "pyfunc") for lam in (0.1, 0.2, 0.3)]
CELLS += [(d, params(d), "arith", 96) for d in ("default", "confidence")]


def cell_id(decoder, p, task, gen):
    return f"{decoder}-{task}-{gen}-" + "-".join(f"{k}{v}" for k, v in sorted(p.items()) if k == "lambda")


def record(cid, decoder, p, task, gen, sample, rng, **kw):
    tokens = rng.randint(5, gen)
    secs = rng.uniform(0.05, 2.0)
    base = dict(experiment=EXP, cell_id=cid, sample_id=sample, model="ripple-tiny", task=task, decoder=decoder,
                params=json.dumps(p, sort_keys=True), gen_length=gen, block_length=16, cache="none", seed=0,
                dtype="float32", chat=False, split="test", stop_at_eos=False, prompt_tokens=30, completion="x",
                generated_tokens=tokens, nfe=rng.randint(4, gen), lookahead_nfe=0, decode_seconds=secs,
                tps=tokens / secs, canvas_tps=gen / secs, correct=rng.random() < 0.6, score="{}",
                hardware="cpu test", finished_at=1.0, run_id="r")
    return SampleRecord(**{**base, **kw})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The store plus the final record of every key, as the store's reader must resolve them."""
    root = tmp_path_factory.mktemp("store")
    st = ResultStore(root, EXP)
    rng = random.Random(7)
    final = {}
    for decoder, p, task, gen in CELLS:
        cid = cell_id(decoder, p, task, gen)
        recs = [record(cid, decoder, p, task, gen, f"s{i}", rng) for i in range(5)]
        st.append(recs)
        final.update({(cid, r.sample_id): r for r in recs})
    # a failed sample (kept, excluded from metrics) and a re-computed sample (the later one counts)
    cid = cell_id("confidence", params("confidence"), "arith", 48)
    failed = record(cid, "confidence", params("confidence"), "arith", 48, "bad", rng, error="boom", correct=None,
                    nfe=999, decode_seconds=100.0, generated_tokens=1)
    cid0 = cell_id("default", params("default"), "arith", 48)
    redo = record(cid0, "default", params("default"), "arith", 48, "s0", rng, nfe=47, finished_at=2.0)
    st.append([failed, redo])
    final[(cid, "bad")] = failed
    final[(cid0, "s0")] = redo
    return root, final


def expected(final):
    """Per cell by hand (no polars): accuracy, mean NFE, TPS, speedup, from the resolved records."""
    cells = {}
    for (cid, _), r in final.items():
        cells.setdefault(cid, []).append(r)
    out = {}
    for cid, recs in cells.items():
        ok = [r for r in recs if r.error is None]
        r0 = recs[0]
        out[cid] = dict(decoder=r0.decoder, params=json.loads(r0.params), task=r0.task, gen=r0.gen_length,
                        n=len(ok), errors=len(recs) - len(ok),
                        acc=100.0 * sum(r.correct for r in ok) / len(ok), nfe=sum(r.nfe for r in ok) / len(ok),
                        tpf=sum(r.generated_tokens for r in ok) / sum(r.nfe for r in ok),
                        tps=sum(r.generated_tokens for r in ok) / sum(r.decode_seconds for r in ok))
    for e in out.values():
        base = [b for b in out.values() if b["decoder"] == "default" and (b["task"], b["gen"]) == (e["task"], e["gen"])]
        e["speedup"] = e["tps"] / base[0]["tps"]
    return out


def label(e):
    lam = e["params"].get("lambda")
    return "rps" if e["decoder"] == "rps" and lam == 0.2 else f"rps(lambda={lam})" if lam is not None else e["decoder"]


def fmt(e):
    return f"{e['acc']:.1f}", f"{e['nfe']:.2f}", f"{e['tpf']:.2f}", f"{e['tps']:.1f}", f"{e['speedup']:.2f}x"


@pytest.fixture(scope="module")
def report(store, tmp_path_factory):
    root, _ = store
    return build_report(root, EXP, tmp_path_factory.mktemp("out") / "rep", track=False)


def md_row(row) -> str:
    return "| " + " | ".join(row) + " |"


def test_main_tables_match_the_records(store, report):
    _, final = store
    exp = expected(final)
    mains = [t for t in report.tables if t.kind == "main"]
    assert len(mains) == 2  # gen_length 48 and 96 are two contexts
    md = (report.out_dir / "report.md").read_text()
    seen = 0
    for table in mains:
        gen = 48 if "gen_length 48" in table.title else 96
        tasks = [h.split()[0] for h in table.header[1::5]]
        for row in table.rows:
            for k, task in enumerate(tasks):
                e = [v for v in exp.values() if (label(v), v["task"], v["gen"]) == (row[0], task, gen)]
                assert len(e) == 1, (row[0], task, gen)
                shown = row[1 + 5 * k: 6 + 5 * k]
                assert tuple(v.split(" ")[0] for v in shown) == fmt(e[0])  # the estimates, then their intervals
                assert " ±" in shown[0] and (e[0]["decoder"] == "default" or " ±" in shown[4])
                seen += 1
            assert md_row(row) in md
    assert seen == len(exp)
    default_rows = [r for t in mains for r in t.rows if r[0] == "default"]
    assert all(r[5] == "1.00x" for r in default_rows)


def test_cells_csv_has_full_precision_numbers_and_error_counts(store, report):
    _, final = store
    exp = expected(final)
    with (report.out_dir / "cells.csv").open() as fh:
        rows = {r["cell_id"]: r for r in csv.DictReader(fh)}
    assert set(rows) == set(exp)
    for cid, e in exp.items():
        r = rows[cid]
        assert int(r["n"]) == e["n"] and int(r["errors"]) == e["errors"]
        for col, key in (("accuracy", "acc"), ("mean_nfe", "nfe"), ("tpf", "tpf"), ("tps", "tps"),
                         ("speedup", "speedup")):
            assert float(r[col]) == pytest.approx(e[key], rel=1e-9)
    assert sum(e["errors"] for e in exp.values()) == 1


def test_length_robustness_table(store, report):
    _, final = store
    exp = expected(final)
    (table,) = [t for t in report.tables if t.kind == "length"]
    assert "task arith" in table.title
    assert table.header[1:4] == ("g48/b16 acc %", "g48/b16 TPS", "g48/b16 speedup")
    assert table.header[4:7] == ("g96/b16 acc %", "g96/b16 TPS", "g96/b16 speedup")
    rows = {r[0]: r for r in table.rows}
    for d in ("default", "confidence"):
        for j, gen in enumerate((48, 96)):
            (e,) = [v for v in exp.values() if (v["decoder"], v["task"], v["gen"]) == (d, "arith", gen)]
            a, _, _, t, s = fmt(e)
            assert tuple(v.split(" ")[0] for v in rows[d][1 + 3 * j: 4 + 3 * j]) == (a, t, s)
    assert rows["rps"][4:7] == ("-", "-", "-")  # rps ran at 48 only


def brute_front(points, senses):
    def better(a, b):
        signs = [1 if s == "max" else -1 for s in senses]
        ge = all(sg * (x - y) >= 0 for sg, x, y in zip(signs, a, b))
        return ge and any(sg * (x - y) > 0 for sg, x, y in zip(signs, a, b))
    return [not any(better(q, p) for q in points) for p in points]


def test_sensitivity_tables_for_the_lambda_sweep(store, report):
    _, final = store
    exp = expected(final)
    tables = [t for t in report.tables if t.kind == "sensitivity"]
    assert {("task arith" in t.title) for t in tables} == {True, False} and len(tables) == 2
    for table in tables:
        task = "arith" if "task arith" in table.title else "pyfunc"
        assert table.header[0] == "lambda"
        sweep = sorted((v for v in exp.values() if v["decoder"] == "rps" and v["task"] == task),
                       key=lambda v: v["params"]["lambda"])
        assert [r[0] for r in table.rows] == [str(v["params"]["lambda"]) for v in sweep]
        tps_front = brute_front([(v["acc"], v["tps"]) for v in sweep], ("max", "max"))
        nfe_front = brute_front([(v["acc"], v["nfe"]) for v in sweep], ("max", "min"))
        for row, v, ft, fn in zip(table.rows, sweep, tps_front, nfe_front):
            assert tuple(x.split(" ")[0] for x in row[1:6]) == fmt(v) and row[6] == str(v["n"])
            assert ("acc-TPS" in row[7]) == ft and ("acc-NFE" in row[7]) == fn
        assert table.figures and (report.out_dir / table.figures[0]).exists()


def test_pngs_are_valid_and_referenced(report):
    pngs = sorted(p.name for p in report.out_dir.glob("*.png"))
    assert pngs == sorted(f.name for f in report.figures)
    assert {"pareto-arith-1.png", "pareto-pyfunc-1.png", "speedup-1.png", "pareto-arith-2.png"} <= set(pngs)
    md = (report.out_dir / "report.md").read_text()
    for name in pngs:
        with Image.open(report.out_dir / name) as im:
            im.verify()
            assert im.format == "PNG"
        assert f"]({name})" in md


def test_html_is_self_contained(report):
    page = (report.out_dir / "report.html").read_text()
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(uris) == len(report.figures)
    stripped = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)
    assert "http" not in stripped and "src=\"" not in stripped.replace('src=""', "")
    assert "<link" not in stripped and "<script" not in stripped
    assert "Decoders x tasks" in page


@pytest.mark.slow
def test_report_cli_logs_to_mlflow_once(store, tmp_path):
    from mlflow.tracking import MlflowClient

    from ripple.platform.experiments.tracking import CELL_TAG, Tracker

    root, final = store
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker.open(EXP, root, uri)  # a grid would have made one run per cell
    some_cell = next(iter(final))[0]
    cell_run = tracker.client.create_run(tracker.experiment_id, tags={CELL_TAG: some_cell}).info.run_id
    out = tmp_path / "rep"
    for _ in range(2):
        assert main(["report", EXP, "--store", str(root), "--tracking-uri", uri, "--out", str(out)]) == 0
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([tracker.experiment_id], filter_string="tags.ripple_report = 'true'")
    assert len(runs) == 1 and runs[0].info.run_name == "report"
    names = {a.path for a in client.list_artifacts(runs[0].info.run_id, "report")}
    assert {"report/report.md", "report/report.html", "report/cells.csv", "report/speedup-1.png"} <= names
    assert cell_run in (out / "report.md").read_text()  # the cell index names the cell's MLflow run


def test_bad_input_is_one_line_and_exit_2(store, tmp_path, capsys):
    root, _ = store
    cases = [
        (["report", "nope", "--store", str(root), "--no-tracking"], "unknown experiment 'nope'"),
        (["report", EXP, "--store", str(tmp_path / "missing"), "--no-tracking"], "no result store"),
        (["report", "bad/name", "--store", str(root), "--no-tracking"], "invalid"),
    ]
    empty = tmp_path / "empty"
    (empty / "void" / "records").mkdir(parents=True)
    cases.append((["report", "void", "--store", str(empty), "--no-tracking"], "has no sample records"))
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    cases.append((["report", EXP, "--store", str(root), "--no-tracking", "--out", str(taken)], "not a report folder"))
    for argv, text in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert text in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in taken.iterdir()) == ["notes.txt"]  # nothing partial written
    assert not (root / "nope").exists() and not (empty / "void" / "report").exists()


def test_the_main_table_shows_throughput_when_a_cell_ran_in_batches(report, tmp_path):
    assert not any("throughput" in h for t in report.tables for h in t.header)  # every cell ran at batch 1
    rng = random.Random(3)
    st = ResultStore(tmp_path / "store", "b4")
    recs = [record(f"{d}-arith", d, params(d), "arith", 48, f"s{i}", rng, batch_size=4, batch_id=f"{d}{i // 4}",
                   batch_seconds=0.5 + i // 4, experiment="b4") for d in ("default", "confidence") for i in range(8)]
    st.append(recs)
    rep = build_report(tmp_path / "store", "b4", tmp_path / "rep", track=False)
    (main,) = [t for t in rep.tables if t.kind == "main"]
    col = main.header.index("arith throughput")
    for row in main.rows:
        mine = [r for r in recs if r.decoder == row[0]]  # two batches of 4, 0.5 s and 1.5 s of wall time
        assert row[col] == f"{sum(r.generated_tokens for r in mine) / 2.0:.1f}"


def test_accuracy_plots_draw_each_points_wilson_interval(store, report):
    """The Pareto plot (accuracy vs TPS, vs mean NFE) and the sensitivity plot: one bar per point, from the
    Wilson interval of the point's correct / samples counted here from the records; the caption says so."""
    _, final = store
    exp = expected(final)
    counts = {}  # cell id -> (correct, samples without error)
    for (cid, _), r in final.items():
        c, n = counts.get(cid, (0, 0))
        counts[cid] = (c + bool(r.correct), n + 1) if r.error is None else (c, n)
    cells = report.cells.filter((pl.col("task") == "arith") & (pl.col("gen_length") == 48))
    assert cells.height == 5  # default, confidence, rps at three lambdas
    fig = pareto_figure(cells, "t")
    for ax, key in zip(fig.axes, ("tps", "nfe")):
        want = wilson_bars((exp[cid][key], *counts[cid]) for cid in cells["cell_id"])
        assert bars(ax) == want
    assert has_interval_legend(fig)
    ((_, rows, _),) = [g for g in sensitivity_groups(report.cells) if g[0]["task"] == "arith"]
    fig = sensitivity_figure(rows, "lambda", "t")
    assert bars(fig.axes[0]) == wilson_bars((exp[cid]["params"]["lambda"], *counts[cid]) for cid in rows["cell_id"])
    assert has_interval_legend(fig)
    md = (report.out_dir / "report.md").read_text()
    # under the Pareto plots of each main table (lengths 48 and 96) and under each sensitivity plot
    assert md.count(f"Pareto plots: {INTERVAL_CAPTION}") == 2 and md.count(INTERVAL_CAPTION) == 4


def test_the_failure_table_shows_rps_with_carry_on_and_off_and_what_each_wrote_twice(tmp_path):
    """Traced records of default, rps and rps(carry=False) on one problem each gets wrong the same way: the
    pivot writes 10 at position 1 (default has 11 there) and the next step writes 10 at 2 as well. With the
    carried step both come from one forward (parallel, duplicate); without it the second reads a fresh
    forward (neither), and both leave 10 twice where default's answer has it once (twice %)."""
    from ripple.platform.runtime.tracing import Decision, Trace

    def trace(*forwards):  # (forward, phase, [(position, token)]) per decision
        return Trace(tuple(Decision(f, None, ph, 0, i, tuple((p, t, 0.9) for p, t in c))
                           for i, (f, ph, c) in enumerate(forwards))).dumps()

    right = trace((1, "step", [(0, 20), (3, 21)]), (2, "step", [(2, 10)]), (3, "step", [(1, 11)]))
    wrong = {"true": trace((1, "step", [(0, 20), (3, 21)]), (2, "resolve", [(1, 10)]), (2, "step", [(2, 10)])),
             "false": trace((1, "step", [(0, 20), (3, 21)]), (2, "resolve", [(1, 10)]), (3, "step", [(2, 10)]))}
    st = ResultStore(tmp_path / "store", EXP)
    rng = random.Random(3)
    rows = [("default", params("default"), {"s0": right, "s1": right})]
    rows += [("rps", params("rps", carry=carry == "true"), {"s0": wrong[carry], "s1": right}) for carry in wrong]
    for decoder, p, traces in rows:
        cid = f"{decoder}-{p.get('carry')}"
        st.append([record(cid, decoder, p, "arith", 48, sid, rng, trace=t, correct=t == right)
                   for sid, t in traces.items()])
    build_report(tmp_path / "store", EXP, tmp_path / "rep", track=False)
    markdown = (tmp_path / "rep" / "report.md").read_text().split("Parallel failures")[-1].split("## Cells")[0]
    head = next(line for line in markdown.splitlines() if line.startswith("| decoder |"))
    assert head.split(" | ")[1:5] == ["wrong where default is right", "parallel %", "duplicate %", "twice %"]
    got = {r.split(" | ")[0][2:]: r.split(" | ")[1:5] for r in markdown.splitlines() if r.startswith("| rps")}
    assert got == {"rps": ["1", "100.0", "100.0", "100.0"], "rps(carry=False)": ["1", "0.0", "0.0", "100.0"]}
