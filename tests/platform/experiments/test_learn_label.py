"""`ripple learn label` writes Learn2PD's training records (golden: ../shared/golden/learn2pd/
training_records.json, `generate_data` on ripple-tiny train prompts 0 and 1 in settings A and B).

Per prompt the records match the golden ones in number, order, block, step and every label, the
labelling run's forwards commit what the reference's did (the stalled-block fill included, where it
fills) and the plain run's answer is the reference's. The confidences match to float32 rounding of
the forward, not bit for bit: the golden was made on a 16-lane (AVX-512) CPU, and on an 8-lane (AVX2)
one Ripple's float32 logits differ from its by about 1e-6 (the golden's own top-1 minus top-2 logit
margins are missed by as much; the final softmax is computed in the golden's lane order, as learn2pd
does), so a confidence can sit a few float32 steps away; the labels, which depend on the argmax
only, are exact. The workflow (one-cell grid on Ray, resumable, Parquet out) runs through the CLI."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.clitools import run_cli

SETTINGS = {"A": (48, 16), "B": (64, 32)}
CONFIDENCE_TOLERANCE = 1e-5  # float32 kernels of another CPU; labels and order are exact


@pytest.fixture(scope="module")
def reference(golden):
    return json.loads((golden / "learn2pd" / "training_records.json").read_text())


@pytest.fixture(scope="module")
def worker():
    from ripple.platform.experiments.workers import SampleWorker

    return SampleWorker("ripple-tiny", dtype="float32", threads=1)


def _entry(reference, setting, prompt_id):
    return next(p for p in reference["prompts"] if p["setting"] == setting and p["prompt_id"] == prompt_id)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_the_labelling_run_writes_generate_datas_records(setting, reference, worker):
    from ripple.platform.experiments.grid import plan
    from ripple.platform.experiments.labels import label_spec, trace_records
    from ripple.platform.runtime.reference import Reference
    from ripple.platform.runtime.tracing import Trace

    gen, block = SETTINGS[setting]
    spec = label_spec("ripple-tiny", "arith", limit=2, gen_length=gen, block_length=block, dtype="float32")
    items = plan(spec)
    assert [it.example.id for it in items] == [p["prompt_id"] for p in reference["prompts"] if p["setting"] == setting]
    fills_seen = 0
    for item in items:
        want = _entry(reference, setting, item.example.id)
        rec = worker.run(item)
        assert rec.error is None, rec.error
        got = trace_records(item.example.id, rec.trace)
        assert len(got) == len(want["records"]) == want["nfe_label"] == rec.nfe
        assert [(r.step, list(r.is_correct)) for r in got] == [(w["step"], w["is_correct"]) for w in want["records"]]
        assert [r.block for r in got] == [f["block"] for f in want["labelling_forwards"]]
        for r, w in zip(got, want["records"]):
            assert len(r.confidence) == block
            assert max(abs(a - b) for a, b in zip(r.confidence, w["confidence"])) < CONFIDENCE_TOLERANCE
        decisions = [d for d in Trace.loads(rec.trace).decisions if "confidence" in d.info]
        assert [sorted([c[0], c[1]] for c in d.commits) for d in decisions] == \
            [sorted(f["commits"]) for f in want["labelling_forwards"]]
        assert [i for i, d in enumerate(decisions) if d.info.get("fill")] == want["fills"]
        fills_seen += len(want["fills"])
        assert rec.reference_nfe == want["nfe_plain"]
        # the labelling run writes the answer: its tokens are the plain run's
        assert list(Reference.from_trace(Trace.loads(rec.trace).decisions).tokens) == want["answer"]
    if setting == "B":
        assert fills_seen > 0  # the stalled-block rule is exercised (train prompt 0 fills a block)


@pytest.mark.slow  # Ray and a worker pool per run
def test_label_writes_the_records_as_parquet_and_resumes(tmp_path, reference, ray_joined):
    out = tmp_path / "labels.parquet"
    store = tmp_path / "store"
    args = ["learn", "label", "--model", "ripple-tiny", "--task", "arith", "--gen-length", "48", "--block-length", "16",
            "--steps", "48", "--dtype", "float32", "--out", str(out), "--store", str(store), "--workers", "1"]
    first = run_cli(args + ["--limit", "1"])
    assert first.returncode == 0, first.stderr
    assert "1 labelled now, 0 already stored" in first.stdout
    again = run_cli(args + ["--limit", "2"])  # the first prompt is stored: only the second is labelled
    assert again.returncode == 0, again.stderr
    assert "8 records of 2 prompts" in again.stdout and "1 labelled now, 1 already stored" in again.stdout
    table = pq.read_table(out)
    # Learn2PD's five columns, then the per-position columns other recipes read (decoders/features.py)
    assert table.column_names == ["sample_id", "block", "step", "confidence", "is_correct", "margin", "entropy",
                                  "is_committed"]
    assert all(len(r["margin"]) == len(r["entropy"]) == len(r["is_committed"]) == 16 for r in table.to_pylist())
    assert [r["is_committed"] for r in table.to_pylist() if r["step"] == 0] == [[False] * 16] * 6
    assert pa.types.is_float32(table.schema.field("confidence").type.value_type)  # float32 values
    assert pa.types.is_boolean(table.schema.field("is_correct").type.value_type)
    rows = table.to_pylist()
    want = [(p["prompt_id"], f["block"], r["step"], r["is_correct"])
            for p in reference["prompts"] if p["setting"] == "A" for f, r in zip(p["labelling_forwards"], p["records"])]
    assert [(r["sample_id"], r["block"], r["step"], r["is_correct"]) for r in rows] == want
    conf = [c for p in reference["prompts"] if p["setting"] == "A" for r in p["records"] for c in r["confidence"]]
    assert max(abs(a - b) for a, b in zip([c for r in rows for c in r["confidence"]], conf)) < CONFIDENCE_TOLERANCE
    meta = json.loads(table.schema.metadata[b"ripple.learn"])
    assert (meta["model"], meta["task"], meta["split"], meta["prompts"], meta["records"]) == \
        ("ripple-tiny", "arith", "train", 2, 8)
    assert meta["weights_sha256"] == reference["facts"]["model"]["sha256"]
    assert (meta["gen_length"], meta["block_length"], meta["steps"]) == (48, 16, 48)
    third = run_cli(args + ["--limit", "2"])  # nothing left to label: the same file again
    assert third.returncode == 0 and "0 labelled now, 2 already stored" in third.stdout
    assert pq.read_table(out).equals(table)


@pytest.mark.parametrize("change,message", [
    (["--task", "nope"], "unknown task 'nope'; registered: arith"),
    (["--model", "no-such-model"], "model 'no-such-model' not found"),
    (["--gen-length", "48", "--block-length", "20"], "gen_length 48 is not divisible by block_length 20; accepted"),
    (["--steps", "16", "--gen-length", "48", "--block-length", "16"], "must be a multiple of the number of blocks (3"),
    (["--steps", "0"], "--steps must be a positive number of forwards"),
    (["--split", "nope"], "unknown split 'nope'"),
    (["--limit", "0"], "--limit must be a positive number of prompts"),
    (["--workers", "0"], "--workers must be positive"),
    (["--task", "arith,nope"], "unknown task 'nope'; registered: arith"),
    (["--task", "arith,pyfunc,arith"], "--task names a task twice: arith,pyfunc,arith"),
    (["--task", "arith,"], "--task takes a task name or a comma list of them"),
])
def test_bad_label_input_is_one_line_and_exit_2(tmp_path, change, message):
    out = tmp_path / "labels.parquet"
    base = {"--model": "ripple-tiny", "--task": "arith", "--out": str(out), "--store": str(tmp_path / "store")}
    for flag, value in zip(change[::2], change[1::2]):
        base[flag] = value
    proc = run_cli(["learn", "label", *[w for kv in base.items() for w in kv]])
    assert proc.returncode == 2
    assert proc.stderr.startswith("ripple learn: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr
    assert not out.exists() and not (tmp_path / "store").exists()  # refused before any work


def test_label_refuses_an_out_path_in_a_missing_folder(tmp_path):
    proc = run_cli(["learn", "label", "--model", "ripple-tiny", "--task", "arith",
                    "--out", str(tmp_path / "no" / "labels.parquet")])
    assert proc.returncode == 2 and "--out" in proc.stderr and "does not exist" in proc.stderr


@pytest.mark.slow
def test_the_python_api_labels_as_the_command_does(tmp_path, reference, ray_joined):
    import ripple

    with pytest.raises(ripple.RippleError, match="gen_length 48 is not divisible by block_length 20"):
        ripple.learn_label("ripple-tiny", "arith", tmp_path / "x.parquet", block_length=20)
    done = ripple.learn_label("ripple-tiny", "arith", tmp_path / "b.parquet", limit=1, gen_length=64, block_length=32,
                              dtype="float32", store=tmp_path / "store", workers=1)
    want = _entry(reference, "B", "arith-s0-train-0")
    assert (done.prompts, done.records, done.computed) == (1, len(want["records"]), 1)
    rows = pq.read_table(done.out).to_pylist()
    assert [r["step"] for r in rows] == [r["step"] for r in want["records"]]
    assert [r["is_correct"] for r in rows] == [r["is_correct"] for r in want["records"]]


@pytest.mark.slow
def test_several_tasks_are_labelled_into_one_file_in_the_order_given(tmp_path, reference, ray_joined):
    import ripple
    from ripple.platform.experiments.grid import plan
    from ripple.platform.experiments.labels import label_spec

    spec = label_spec("ripple-tiny", "arith,pyfunc", limit=1, dtype="float32")
    assert [c.task for c in spec.cells] == ["arith", "pyfunc"]  # one cell per task, in the order given
    pyfunc_id = [it.example.id for it in plan(spec) if it.cell.task == "pyfunc"]
    alone = ripple.learn_label("ripple-tiny", "pyfunc", tmp_path / "pyfunc.parquet", limit=1, dtype="float32",
                               store=tmp_path / "store", workers=1)
    done = ripple.learn_label("ripple-tiny", ["arith", "pyfunc"], tmp_path / "both.parquet", limit=1, dtype="float32",
                              store=tmp_path / "store", workers=1)
    assert (done.prompts, done.computed) == (2, 1)  # pyfunc's prompt was stored by the first run
    rows = pq.read_table(done.out).to_pylist()
    want = _entry(reference, "A", "arith-s0-train-0")["records"]
    head, tail = rows[:len(want)], rows[len(want):]
    assert [(r["sample_id"], r["step"], r["is_correct"]) for r in head] == \
        [("arith-s0-train-0", w["step"], w["is_correct"]) for w in want]
    assert tail == pq.read_table(alone.out).to_pylist() and {r["sample_id"] for r in tail} == set(pyfunc_id)
    meta = json.loads(pq.read_table(done.out).schema.metadata[b"ripple.learn"])
    assert (meta["task"], meta["prompts"], meta["records"]) == ("arith,pyfunc", 2, len(rows))
    assert meta["tasks"] == {"arith": {"prompts": 1, "records": len(want)}, "pyfunc": {"prompts": 1,
                                                                                     "records": len(tail)}}
