"""`ripple learn train`: Learn2PD's notebook recipe (train.ipynb; golden README "Filter training").

The shuffle and split are the notebook's cells run on the same list (Python's global `random`), the
first epoch's numbers are checked against a filter built by hand under the same torch seed (BCE by
its formula; the validation loss after AdamW's first step by that step's formula), and the artifact
is what `load_filter` reads back, its held-out figures recomputed from the loaded filter. The full
reproduction of filter_block16.safetensors needs 200 labelled prompts (minutes of labelling), so it
is a documented command (docs/learning.md), not a test. Bad data files are each one line, exit 2."""
import json
import math
import random

import numpy as np
import pytest

from tests.clitools import run_cli

B = 8


def _records(n: int, seed: int = 1):
    """n labelling records of width B whose labels follow the confidences (as the real ones mostly do)."""
    from ripple.platform.experiments.labels import TrainingRecord

    rng = np.random.default_rng(seed)
    conf = rng.uniform(0.3, 1.0, size=(n, B)).astype(np.float32)
    labels = conf + rng.normal(0, 0.1, size=(n, B)) > 0.75
    return [TrainingRecord(f"s{i // 3}", (i % 3) // 2, i % 2, tuple(float(c) for c in conf[i]),
                           tuple(bool(x) for x in labels[i])) for i in range(n)]


META = {"model": "ripple-tiny", "weights_sha256": "ab" * 32, "task": "arith", "split": "train", "prompts": 20,
        "gen_length": 48, "block_length": B, "steps": 48}


@pytest.fixture()
def data(tmp_path):
    from ripple.platform.experiments.labels import write_records

    path = tmp_path / "labels.parquet"
    write_records(_records(60), path, META)
    return path


@pytest.mark.parametrize("n", [10, 37, 859, 903])
def test_the_split_is_the_notebooks_shuffle_then_80_10_10(n):
    from ripple.platform.training.learn import notebook_split

    saved = random.getstate()
    try:
        for seed in (0, 5):
            records = [f"record {i}" for i in range(n)]
            random.seed(seed)  # the notebook's cells, on the records themselves
            random.shuffle(records)
            first = int(n * 0.8)
            second = first + int(n * 0.1)
            want = (records[:first], records[first:second], records[second:])
            random.seed(123)
            before = random.random()
            random.seed(123)
            split = notebook_split(n, seed)
            assert random.random() == before  # the caller's random state is not touched
            got = tuple([f"record {i}" for i in part] for part in (split.train, split.val, split.test))
            assert got == want
    finally:
        random.setstate(saved)
    if n == 859:  # the golden card's sizes (setting A)
        assert (len(split.train), len(split.val), len(split.test)) == (687, 85, 87)


def test_the_first_epoch_is_bce_of_the_seeded_filter_then_one_adamw_step(data):
    import torch

    from ripple.platform.training.learn import _train_learn2pd, notebook_split, read_records

    recs = read_records(data)
    split = notebook_split(recs.n, 7)
    X = torch.from_numpy(recs.confidence[list(split.train)])
    y = torch.from_numpy(recs.labels[list(split.train)])
    Xv = torch.from_numpy(recs.confidence[list(split.val)])
    yv = torch.from_numpy(recs.labels[list(split.val)])
    state = torch.random.get_rng_state()
    fit = _train_learn2pd(X, y, Xv, yv, block_length=B, epochs=1, seed=7, progress=False)
    assert torch.equal(torch.random.get_rng_state(), state)  # seeding is forked: the caller's stream goes on

    torch.manual_seed(7)  # LogisticRegression(B) as the notebook builds it: Linear(B, 2B), ReLU, Linear(2B, B)
    first, second = torch.nn.Linear(B, 2 * B), torch.nn.Linear(2 * B, B)
    params = [first.weight, first.bias, second.weight, second.bias]

    def bce(inputs, labels):  # mean over records and positions, float64, by the formula
        z = second(torch.relu(first(inputs))).double()
        s = torch.sigmoid(z)
        return -(labels * torch.log(s) + (1 - labels) * torch.log(1 - s)).mean()

    loss = bce(X, y.double())
    loss.backward()
    assert fit.curve[0][1] == pytest.approx(loss.item(), abs=1e-6)
    # AdamW's first step: decay, then lr * m_hat / (sqrt(v_hat) + eps) with m_hat = g, v_hat = g^2
    with torch.no_grad():
        for p in params:
            p.mul_(1 - 0.003 * 0.01).sub_(0.003 * p.grad / (p.grad.abs() + 1e-8))
        assert fit.curve[0][2] == pytest.approx(bce(Xv, yv.double()).item(), abs=1e-6)
        for mine, theirs in zip(fit.module.parameters(), params):
            assert torch.allclose(mine, theirs, atol=1e-6)


def test_train_writes_the_filter_its_card_curve_and_plot(tmp_path, data):
    import torch

    from ripple.decoders.filters import file_sha256, load_filter
    from ripple.platform.training.learn import read_records

    out = tmp_path / "filter"
    proc = run_cli(["learn", "train", "--data", str(data), "--out", str(out), "--epochs", "40", "--seed", "3"])
    assert proc.returncode == 0, proc.stderr
    assert f"{out}: learn2pd filter (learn2pd, block_length {B}) from 60 records of 20 prompts" in proc.stdout
    loaded = load_filter(out, block_length=B, weights_sha256=META["weights_sha256"])
    card = loaded.card
    assert (card.architecture, card.block_length, card.features, card.recipe, card.seeds, card.epochs) == \
        ("learn2pd", B, ("confidence",), "learn2pd", (3,), 40)
    assert (card.model, card.model_sha256, card.task, card.split, card.prompts, card.records) == \
        ("ripple-tiny", META["weights_sha256"], "arith", "train", 20, 60)
    assert card.settings["data_sha256"] == file_sha256(data) and card.settings["gen_length"] == 48
    assert card.metrics["split"] == {"train": 48, "val": 6, "test": 6}
    # the held-out figures, recomputed from the filter as read back, on the notebook's test part
    recs = read_records(data)
    order = list(range(recs.n))
    random.Random(3).shuffle(order)
    test = order[54:]
    Xt, yt = torch.from_numpy(recs.confidence[test]), torch.from_numpy(recs.labels[test])
    preds = (torch.sigmoid(loaded.module(Xt)) > 0.9).float()
    held = card.metrics["test_at_0.9"]
    assert held["positions"] == 6 * B and held["predicted_positive"] == int(preds.sum())
    assert held["accuracy"] == pytest.approx((preds == yt).float().mean().item())
    fp = ((preds > yt).sum() / preds.sum()).item()
    assert (held["false_positive"] is None) if math.isnan(fp) else held["false_positive"] == pytest.approx(fp)
    assert "false positive" in proc.stdout
    lines = (out / "curve.csv").read_text().splitlines()
    assert lines[0] == "epoch,train_loss,val_loss,val_false_positive_at_0.9" and len(lines) == 41
    assert [float(x) for x in lines[-1].split(",")[1:3]] == [card.metrics["final_train_loss"],
                                                           card.metrics["final_val_loss"]]
    assert [r[0] for r in card.metrics["curve"]["rows"]] == [0, 39]
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the same seed trains the same filter (tensor for tensor); another seed another
    from safetensors.torch import load_file

    weights = load_file(out / "model.safetensors")
    for seed, same in (("3", True), ("4", False)):
        again = run_cli(["learn", "train", "--data", str(data), "--out", str(tmp_path / seed), "--epochs", "40",
                         "--seed", seed, "--json"])
        assert again.returncode == 0 and json.loads(again.stdout)["seeds"] == [int(seed)]
        other = load_file(tmp_path / seed / "model.safetensors")
        assert all(torch.equal(weights[k], other[k]) for k in weights) == same


def _write(path, columns: dict, schema=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns, schema=schema), path)
    return path


def _bad_files(tmp_path, data):
    import pyarrow as pa

    good = {"sample_id": ["a"] * 12, "block": [0] * 12, "step": list(range(12)), "confidence": [[0.5] * 4] * 12,
            "is_correct": [[True] * 4] * 12}
    schema = pa.schema([("sample_id", pa.string()), ("block", pa.int64()), ("step", pa.int64()),
                        ("confidence", pa.list_(pa.float32())), ("is_correct", pa.list_(pa.bool_()))])
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1" + bytes(range(256)) * 4)
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(data.read_bytes()[:200])
    return {
        "missing": (tmp_path / "nope.parquet", "no such file"),
        "a directory": (tmp_path, "is not a file"),
        "empty": (_write(tmp_path / "empty.parquet", {k: [] for k in good}, schema), "holds no records"),
        "corrupt bytes": (corrupt, "not a readable Parquet file"),
        "truncated": (truncated, "not a readable Parquet file"),
        "missing columns": (_write(tmp_path / "cols.parquet", {k: v for k, v in good.items() if k != "is_correct"}),
                            "missing column is_correct"),
        "confidence as text": (_write(tmp_path / "text.parquet", {**good, "confidence": [["0.5"] * 4] * 12}),
                               "column confidence is list<element: string>, expected a list of floats"),
        "labels as integers": (_write(tmp_path / "ints.parquet", {**good, "is_correct": [[1] * 4] * 12}),
                               "column is_correct is list<element: int64>, expected a list of booleans"),
        "step as floats": (_write(tmp_path / "steps.parquet", {**good, "step": [0.0] * 12}),
                           "column step is double, expected integers"),
        "widths": (_write(tmp_path / "widths.parquet", {**good, "confidence": [[0.5] * 4] * 11 + [[0.5] * 3],
                                                         "is_correct": [[True] * 4] * 11 + [[True] * 3]}),
                   "rows are of 3, 4 positions"),
        "labels short": (_write(tmp_path / "short.parquet", {**good, "is_correct": [[True] * 4] * 11 + [[True] * 3]}),
                         "row 11 has 4 confidences but 3 labels"),
        "a null": (_write(tmp_path / "null.parquet",
                          {**good, "confidence": [[0.5] * 4] * 11 + [[0.5, None, 0.5, 0.5]]}),
                   "column confidence holds a null"),
        "out of range": (_write(tmp_path / "range.parquet", {**good, "confidence": [[1.5] * 4] * 12}),
                         "a confidence outside [0, 1]"),
        "too few": (_write(tmp_path / "few.parquet", {k: v[:9] for k, v in good.items()}, schema),
                    "9 records leave the 80/10/10 split without validation or held-out records"),
    }


def test_bad_data_files_are_one_line_and_exit_2(tmp_path, data):
    for name, (path, message) in _bad_files(tmp_path, data).items():
        out = tmp_path / f"out-{name.replace(' ', '-')}"
        proc = run_cli(["learn", "train", "--data", str(path), "--out", str(out)])
        assert proc.returncode == 2, (name, proc.stderr)
        assert proc.stderr.startswith("ripple learn: error: --data "), (name, proc.stderr)
        assert proc.stderr.count("\n") == 1, (name, proc.stderr)
        assert message in proc.stderr, (name, proc.stderr)
        assert not out.exists(), name  # nothing written


@pytest.mark.parametrize("args,message", [
    (["--recipe", "learn2pdd"], "unknown recipe 'learn2pdd' (did you mean 'learn2pd'?); accepted: learn2pd, ripple"),
    (["--epochs", "0"], "--epochs must be a positive number of epochs, got 0"),
    (["--seed", "-1"], "--seed must be a non-negative integer, got -1"),
    (["--threads", "0"], "--threads must be a positive number of threads, got 0"),
])
def test_bad_training_options_are_one_line_and_exit_2(tmp_path, data, args, message):
    out = tmp_path / "out"
    proc = run_cli(["learn", "train", "--data", str(data), "--out", str(out), *args])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not out.exists()


def test_the_python_api_trains_and_refuses_as_the_command_does(tmp_path, data):
    import ripple

    with pytest.raises(ripple.RippleError, match="unknown recipe 'nope'"):
        ripple.learn_train(data, tmp_path / "x", recipe="nope")
    with pytest.raises(ripple.RippleError, match="no such file"):
        ripple.learn_train(tmp_path / "missing.parquet", tmp_path / "x")
    done = ripple.learn_train(data, tmp_path / "f", epochs=5, seed=0)
    assert done.card.epochs == 5 and (done.out / "model.safetensors").is_file() and done.plot.is_file()


def test_a_pooled_files_card_names_every_task_and_each_ones_share(tmp_path):
    """Records of several tasks (`ripple learn label --task arith,pyfunc`): the card's task names them all and
    its settings keep each task's prompts and records, as the labelling metadata gave them."""
    from ripple.decoders.filters import load_filter
    from ripple.platform.experiments.labels import write_records

    shares = {"arith": {"prompts": 12, "records": 36}, "pyfunc": {"prompts": 8, "records": 24}}
    path = tmp_path / "pooled.parquet"
    write_records(_records(60), path, {**META, "task": "arith,pyfunc", "tasks": shares})
    out = tmp_path / "filter"
    proc = run_cli(["learn", "train", "--data", str(path), "--out", str(out), "--epochs", "3"])
    assert proc.returncode == 0, proc.stderr
    card = load_filter(out).card
    assert (card.task, card.prompts, card.records) == ("arith,pyfunc", 20, 60)
    assert card.settings["tasks"] == shares
