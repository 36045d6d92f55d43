"""`ripple learn train --recipe ripple`: Ripple's width-free filter on masked positions, candidates chosen
by validation precision at the acceptance threshold, deterministic under the seed; old label files are
refused in one line. The data are built so that the right choice is known."""
import json

import numpy as np
import pytest

from tests.clitools import run_cli

B = 8
META = {"model": "ripple-tiny", "weights_sha256": "cd" * 32, "task": "arith", "split": "train", "prompts": 40,
        "gen_length": 32, "block_length": B, "steps": 32}


def _records(n: int, seed: int = 2, extra: bool = True):
    """n records whose label at a position is its right neighbour's confidence > 0.6 (the last position:
    its own): a filter that sees no neighbour cannot know it. A third of the positions are committed."""
    from ripple.platform.experiments.labels import TrainingRecord

    rng = np.random.default_rng(seed)
    conf = rng.uniform(0.2, 1.0, size=(n, B)).astype(np.float32)
    right = np.concatenate([conf[:, 1:], conf[:, -1:]], axis=1)
    labels = right > 0.6
    committed = rng.uniform(size=(n, B)) < 0.33
    margin = (conf * rng.uniform(0.5, 1.0, size=(n, B))).astype(np.float32)
    entropy = (1.0 - conf).astype(np.float32)
    out = []
    for i in range(n):
        cols = (tuple(float(x) for x in margin[i]), tuple(float(x) for x in entropy[i]),
                tuple(bool(x) for x in committed[i])) if extra else ()
        out.append(TrainingRecord(f"s{i // 2}", 0, i % 2, tuple(float(c) for c in conf[i]),
                                  tuple(bool(x) for x in labels[i]), *cols))
    return out


@pytest.fixture()
def data(tmp_path):
    from ripple.platform.experiments.labels import write_records

    path = tmp_path / "labels.parquet"
    write_records(_records(120), path, META)
    return path


def test_choose_takes_precision_above_a_recall_floor_then_recall():
    from ripple.platform.training.learn import choose

    def s(p, r):
        return {"precision": p, "recall": r}

    assert choose([s(None, 0.0), s(0.80, 0.5)]) == 1  # accepting nothing never wins
    assert choose([s(1.0, 0.05), s(0.90, 0.5)]) == 1  # a perfect precision on too few positions loses
    assert choose([s(0.90, 0.3), s(0.95, 0.2), s(0.95, 0.4)]) == 2  # precision, then recall on a tie
    assert choose([s(0.95, 0.4), s(0.95, 0.4)]) == 0  # an exact tie: the earlier candidate
    assert choose([s(None, 0.0), s(1.0, 0.02)]) == 1  # none reaches the floor: the higher recall


def test_training_chooses_the_candidate_that_sees_the_neighbour(data):
    import torch

    from ripple.platform.training.learn import _recipe_ripple, acceptance, notebook_split, read_records, ripple_inputs

    recs = read_records(data)
    split = notebook_split(recs.n, 0)
    candidates = ({"hidden": 8, "window": 0}, {"hidden": 8, "window": 1})
    fit = _recipe_ripple(recs, split, epochs=250, seed=0, progress=False, candidates=candidates, threshold=0.8)
    scored = fit.metrics["candidates"]
    assert fit.metrics["chosen"] == {"hidden": 8, "window": 1}
    blind, seeing = (c["val"] for c in scored)
    assert seeing["precision"] > blind["precision"] and seeing["recall"] >= 0.1
    # the figures are the filter's own: recomputed on the held-out masked positions
    Xt, yt, mt = ripple_inputs(recs, split.test)
    assert fit.metrics["test_at_threshold"] == acceptance(fit.module, Xt, yt, mt, 0.8)
    accepted = (torch.sigmoid(fit.module(Xt)) > 0.8) & mt
    assert fit.metrics["test_at_threshold"]["accepted"] == int(accepted.sum())
    assert fit.metrics["test_at_threshold"]["masked"] == int(mt.sum()) < mt.numel()  # committed: no candidates


def test_committed_positions_do_not_train_the_filter(data, tmp_path):
    """Flipping every committed position's label changes nothing: the loss reads masked positions only."""
    import pyarrow.parquet as pq
    import torch

    from ripple.platform.training.learn import _recipe_ripple, notebook_split, read_records

    table = pq.read_table(data)
    rows = table.to_pylist()
    for r in rows:
        r["is_correct"] = [(not y) if c else y for y, c in zip(r["is_correct"], r["is_committed"])]
    flipped = tmp_path / "flipped.parquet"
    pq.write_table(table.from_pylist(rows, schema=table.schema), flipped)
    fits = []
    for path in (data, flipped):
        recs = read_records(path)
        fits.append(_recipe_ripple(recs, notebook_split(recs.n, 1), epochs=30, seed=1, progress=False,
                                   candidates=({"hidden": 4, "window": 1},)))
    for a, b in zip(fits[0].module.state_dict().values(), fits[1].module.state_dict().values()):
        assert torch.equal(a, b)


def test_train_writes_a_width_free_filter_with_its_card_and_is_deterministic(data, tmp_path):
    from ripple.decoders.filters import RIPPLE_FEATURES, load_filter

    outs = {name: tmp_path / name for name in ("a", "b", "c")}
    printed = {}
    for name, seed in (("a", 4), ("b", 4), ("c", 5)):
        proc = run_cli(["learn", "train", "--data", str(data), "--out", str(outs[name]), "--recipe", "ripple",
                        "--epochs", "60", "--seed", str(seed)])
        assert proc.returncode == 0, proc.stderr
        printed[name] = proc.stdout
    assert f"{outs['a']}: ripple filter (ripple, any block length) from 120 records of 40 prompts" in printed["a"]
    assert "of 3 candidates; held-out (test) at 0.96 over masked positions: precision" in printed["a"]
    import torch

    # the seed decides everything (tensors compared: safetensors writes its metadata in no fixed order)
    state = {k: load_filter(v).module.state_dict() for k, v in outs.items()}
    assert all(torch.equal(state["a"][k], state["b"][k]) for k in state["a"])
    assert not all(torch.equal(state["a"][k], state["c"][k]) for k in state["a"])
    assert load_filter(outs["a"]).card.metrics == load_filter(outs["b"]).card.metrics | {
        "seconds": load_filter(outs["a"]).card.metrics["seconds"]}
    for block in (B, 2 * B):  # one filter for any block length, checked against the run's model
        loaded = load_filter(outs["a"], block_length=block, weights_sha256=META["weights_sha256"])
    card = loaded.card
    assert (card.architecture, card.block_length, card.features, card.recipe, card.seeds, card.epochs) == \
        ("ripple", None, RIPPLE_FEATURES, "ripple", (4,), 60)
    assert (card.model, card.task, card.split, card.prompts, card.records) == ("ripple-tiny", "arith", "train", 40, 120)
    m = card.metrics
    assert [(c["hidden"], c["window"]) for c in m["candidates"]] == [(16, 1), (32, 1), (32, 2)]
    assert m["chosen"] in [{"hidden": c["hidden"], "window": c["window"]} for c in m["candidates"]]
    assert set(m["test_at_threshold"]) >= {"precision", "recall", "threshold", "accepted", "masked"}
    assert m["test_at_threshold"]["threshold"] == 0.96 and m["hyperparameters"]["threshold"] == 0.96
    assert (outs["a"] / "learning_curve.png").stat().st_size > 0
    assert len((outs["a"] / "curve.csv").read_text().splitlines()) == 61


def test_an_old_label_file_is_refused_for_the_ripple_recipe_in_one_line(tmp_path):
    from ripple.platform.experiments.labels import write_records

    old = tmp_path / "old.parquet"
    write_records(_records(30, extra=False), old, META)  # Learn2PD's five columns only
    out = tmp_path / "filter"
    proc = run_cli(["learn", "train", "--data", str(old), "--out", str(out), "--recipe", "ripple", "--epochs", "5"])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "has no margin, entropy, is_committed columns" in proc.stderr and "`ripple learn label`" in proc.stderr
    assert not out.exists()
    fine = run_cli(["learn", "train", "--data", str(old), "--out", str(out), "--epochs", "5", "--json"])
    assert fine.returncode == 0 and json.loads(fine.stdout)["recipe"] == "learn2pd"  # Learn2PD's recipe still reads it


def test_extra_columns_of_other_widths_or_types_are_refused(tmp_path, data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(data)
    rows = table.to_pylist()
    rows[3]["margin"] = rows[3]["margin"][:-1]
    short = tmp_path / "short.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), short)
    partial = tmp_path / "partial.parquet"
    pq.write_table(table.drop(["entropy"]), partial)
    for path, message in ((short, "column margin has rows of another width than confidence's 8"),
                          (partial, "has margin, is_committed but not entropy")):
        proc = run_cli(["learn", "train", "--data", str(path), "--out", str(tmp_path / "f"), "--recipe", "ripple"])
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
