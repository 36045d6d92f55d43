"""The Parquet result store: keyed by (cell id, sample id), written in atomic part files,
deduplicated on read, compacted without loss; failed samples are kept and retried."""
import dataclasses

import polars as pl
import pytest

from ripple.errors import RippleError
from ripple.platform.experiments.store import SCHEMA, ResultStore, SampleRecord


def rec(cell="c1", sample="s1", **kw) -> SampleRecord:
    base = dict(experiment="e", cell_id=cell, sample_id=sample, model="m", task="arith", decoder="default",
                params="{}", gen_length=48, block_length=16, cache="none", seed=0, dtype="float32", chat=False,
                split="test", stop_at_eos=False, nfe=48, correct=True, finished_at=1.0, run_id="r1")
    return SampleRecord(**{**base, **kw})


def test_records_are_frozen_and_carry_the_design_fields():
    r = rec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.nfe = 3
    design = ["experiment", "cell_id", "model", "task", "decoder", "params", "gen_length", "block_length", "cache",
              "sample_id", "prompt_tokens", "completion", "generated_tokens", "nfe", "decode_seconds", "tps",
              "canvas_tps", "correct", "score", "error", "worker_id", "hardware", "versions", "seed"]
    assert set(design) <= set(SCHEMA)


def test_append_read_roundtrip_and_part_files(tmp_path):
    store = ResultStore(tmp_path, "exp")
    store.append([rec(sample="s1"), rec(sample="s2", completion="x\ny", tps=12.5)])
    store.append([rec(cell="c2", sample="s1", correct=False)])
    assert len(store.files()) == 2 and all(f.name.startswith("part-") for f in store.files())
    frame = store.read()
    assert frame.height == 3 and frame.schema == pl.Schema(SCHEMA)
    assert frame.filter(pl.col("sample_id") == "s2")["completion"].item() == "x\ny"
    assert store.done_keys() == {("c1", "s1"), ("c1", "s2"), ("c2", "s1")}


def test_read_deduplicates_preferring_success_then_latest(tmp_path):
    store = ResultStore(tmp_path, "exp")
    store.append([rec(sample="a", error="worker died: x", correct=None, finished_at=5.0)])
    store.append([rec(sample="a", nfe=30, finished_at=6.0), rec(sample="b", nfe=10, finished_at=1.0)])
    store.append([rec(sample="b", nfe=11, finished_at=2.0), rec(sample="c", error="boom", finished_at=3.0)])
    frame = store.read()
    assert frame.height == 3
    assert dict(zip(frame["sample_id"], frame["nfe"])) == {"a": 30, "b": 11, "c": 48}
    assert frame.filter(pl.col("sample_id") == "c")["error"].item() == "boom"  # failures are kept...
    assert store.done_keys() == {("c1", "a"), ("c1", "b")}  # ...and retried by the next run


def test_compaction_merges_parts_without_loss_and_ignores_temp_files(tmp_path):
    store = ResultStore(tmp_path, "exp")
    for i in range(5):
        store.append([rec(sample=f"s{i}")])
    (store.dir / ".tmp-part-x.parquet").write_bytes(b"half a file")  # a writer killed mid-write
    before = store.read()
    store.compact()
    assert [f.name.split("-")[0] for f in store.files()] == ["compact"]
    assert store.read().equals(before)
    store.append([rec(sample="s0")])  # a duplicate row (crash between merge and delete) stays invisible
    assert store.read_all().height == 6 and store.read().height == 5
    store.clear()
    assert store.read().height == 0


def test_bad_names_are_clear_errors(tmp_path):
    with pytest.raises(RippleError, match="experiment name '../x' is invalid"):
        ResultStore(tmp_path, "../x")


def test_damaged_files_are_quarantined_with_one_warning_each(tmp_path, caplog):
    store = ResultStore(tmp_path, "exp")
    store.append([rec(sample="s0")])
    kept = store.append([rec(sample="s1"), rec(sample="s2"), rec(sample="s3")])
    truncated = store.append([rec(sample="s4"), rec(sample="s5")])
    assert truncated.name.endswith("-n2.parquet")  # the row count survives in the name when the footer does not
    truncated.write_bytes(truncated.read_bytes()[:-100])
    (store.dir / "part-zzz.parquet").write_bytes(b"not parquet")  # no count anywhere
    with caplog.at_level("WARNING", logger="ripple"):
        assert sorted(store.read()["sample_id"]) == ["s0", "s1", "s2", "s3"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings
    assert any(str(truncated) in w and "held 2 records" in w for w in warnings)
    assert any("part-zzz.parquet" in w and "unknown number of records" in w for w in warnings)
    assert sorted(p.name for p in store.quarantine.iterdir()) == sorted([truncated.name, "part-zzz.parquet"])
    assert store.set_aside() == (2, None)  # one count unknown
    (store.quarantine / "part-zzz.parquet").unlink()
    assert store.set_aside() == (1, 2)
    caplog.clear()
    store.compact()  # the good files merge; nothing more is set aside
    assert not caplog.records and store.read().height == 4 and kept.exists() is False


def test_a_store_written_before_batches_reads_as_batch_1_and_compacts_with_new_parts(tmp_path):
    store = ResultStore(tmp_path, "exp")
    store.dir.mkdir(parents=True)
    from ripple.platform.experiments.store import to_frame

    old = to_frame([rec(sample="old1"), rec(sample="old2")]).drop("batch_size", "batch_id", "batch_seconds")
    old.write_parquet(store.dir / "part-old-0000001.parquet")  # the schema before throughput mode
    store.append([rec(sample="new", batch_size=4, batch_id="b1", batch_seconds=2.0)])
    frame = store.read()
    assert frame.schema == pl.Schema(SCHEMA)
    assert dict(zip(frame["sample_id"], frame["batch_size"])) == {"old1": 1, "old2": 1, "new": 4}
    assert frame.filter(pl.col("sample_id") == "old1")["batch_seconds"].item() is None
    store.compact()  # old and new part files merge into one file of the current schema
    assert len(store.files()) == 1 and store.read().equals(frame)
    assert set(pl.read_parquet(store.files()[0]).columns) == set(SCHEMA)


def test_check_weights_refuses_samples_other_weights_decoded(tmp_path):
    store = ResultStore(tmp_path, "exp")
    store.append([rec(sample="s1", weights="aaa"), rec(sample="s2", weights="aaa"),
                  rec(sample="s3", model="org/hub", weights="zzz"), rec(sample="s4", weights="bbb", error="boom")])
    store.check_weights({"m": "aaa", "org/hub": None}, "use --fresh")  # same weights; hub ids unchecked; errors retried
    with pytest.raises(RippleError, match=r"^experiment 'exp' holds 2 samples of m decoded by other weights "
                                          r"\(aaa; m is now ccc\): use --fresh$"):
        store.check_weights({"m": "ccc"}, "use --fresh")
    store.append([rec(sample="s5")])  # a record stored before records carried a digest
    with pytest.raises(RippleError, match=r"holds 3 samples of m decoded by other weights \(aaa, unrecorded;"):
        store.check_weights({"m": "ccc"}, "use --fresh")
    with pytest.raises(RippleError, match=r"holds 1 samples of m .*\(unrecorded; m is now aaa\)"):
        store.check_weights({"m": "aaa"}, "use --fresh")


def test_a_store_written_before_the_strict_column_reads_it_as_none(tmp_path):
    """ParallelBench's `score_strict` column came later: older part files load with it empty, their
    cells' metrics have no strict figure, and the new records carry theirs."""
    from ripple.platform.experiments.metrics import cell_metrics
    from ripple.platform.experiments.store import to_frame

    store = ResultStore(tmp_path, "exp")
    store.dir.mkdir(parents=True)
    to_frame([rec(sample="old")]).drop("score_strict").write_parquet(store.dir / "part-old-0000001.parquet")
    store.append([rec(sample="new", cell="c2", score_strict=0.0)])
    frame = store.read()
    assert frame.schema == pl.Schema(SCHEMA)
    assert dict(zip(frame["sample_id"], frame["score_strict"])) == {"old": None, "new": 0.0}
    old, new = (frame.filter(pl.col("sample_id") == s) for s in ("old", "new"))
    assert cell_metrics(old).strict is None and cell_metrics(new).strict == 0.0
